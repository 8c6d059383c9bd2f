"""anvil.ray_pool: `anvil serve --ray`'s workers, Ray actors on a Ray cluster (docs/service.md).

`anvil serve --ray ADDRESS` starts this bridge as its child. It joins the cluster as a driver and
places one worker actor per GPU the cluster offers (device cuda; `--ray-workers N` for fewer) or
N of them on the CPUs (device cpu; default one per node), spread over the nodes. Each worker runs
a node-local `anvil serve` on 127.0.0.1 (its GPU, the server's evaluation options, a state
directory of its own), so an evaluation on a worker is judged exactly as `anvil eval` judges it
there: the same private copies, build cache, zygote, defenses and reward. The server keeps the
durable store, the queue, the sessions and the scheduling; a lane per worker sends its claimed
evaluation (task and candidate inline: the worker's node need not share a file system) and gets
the worker's answer.

Protocol, JSON lines. On stdout first:

    {"ready": [{"lane": 0, "node": IP, "node_id": ID, "gpus": [..], "pid": P}, ...], "ray": VERSION}
    or {"error": "why"} (then exit 2)

then on stdin `{"call": N, "lane": L, "request": {...}, "key": K}`, answered on stdout by
`{"call": N, "result": {...}}` (the worker server's anvil.serve-evaluation/1 body) or
`{"call": N, "error": "why", "lost": true}` when the worker died or its server ended under the
evaluation (Ray starts it again: the lane goes on). End of stdin: the actors are ended and the
bridge exits. The actors are the driver's (not detached): they end with it.

Nothing here imports anvil or torch: the bridge needs only Ray (the cluster's version), the
workers only the standard library and the anvil binary at the same path on every node.
"""
import argparse
import json
import os
import sys
import threading
import time

PROTOCOL = "anvil.ray-pool/1"
PLACE_TIMEOUT_S = 120  # the workers placed and their servers up, or an error that says what the cluster has
WORKER_DIR_PREFIX = "anvil-ray-worker-"  # each lane's folder, under the worker's TMPDIR


def worker_servers():
    """Pids of this host's workers' node-local servers (found by their state folder's name in
    their command line): what a test or a check kills to see a lane come back."""
    pids = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and any(WORKER_DIR_PREFIX.encode() in a for a in argv):
            pids.append(int(pid))
    return pids


class Worker:
    """One lane: a node-local `anvil serve` (a GPU of its own, or the CPU) run by this actor."""

    def __init__(self, anvil, device, serve_args, name):
        import shutil

        # One folder per lane of this bridge, emptied when the lane's actor starts again.
        self.dir = os.path.join(os.environ.get("TMPDIR") or "/tmp", WORKER_DIR_PREFIX + name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir, mode=0o700)
        gpus = []
        if device == "cuda":
            import ray

            ids = [str(g) for g in ray.get_gpu_ids()]
            if len(ids) != 1 or not ids[0].isdigit():
                raise RuntimeError("the worker was given GPU ids %r: one index was expected" % (ids,))
            # The server sees the node's GPUs and gives its runner the one Ray gave this actor
            # (CUDA_VISIBLE_DEVICES=that index, in the same order Ray counted them).
            gpus = ["--gpus", ids[0]]
        self.argv = [anvil, "serve", "--host", "127.0.0.1", "--port", "0", "--state", os.path.join(self.dir, "state"),
                     "--max-body-mb", "1024", "--device", device] + gpus + list(serve_args)
        self._start()

    def _start(self):
        import ctypes
        import secrets
        import subprocess

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork, not in the child

        # A token of its own: nothing else on the node (another user, a candidate's process that
        # reaches the loopback) may submit to it.
        self.token = secrets.token_hex(16)
        env = dict(os.environ, ANVIL_SERVE_TOKEN=self.token)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        log = open(os.path.join(self.dir, "serve.log"), "ab")
        # Its own session (a signal to the actor's group does not reach it) and killed with this
        # actor's process whatever ends it (Ray kills actors with SIGKILL): an evaluation's
        # processes end with their server (docs/service.md).
        parent = os.getpid()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                     start_new_session=True, preexec_fn=lambda: _die_with(prctl, parent), env=env)
        log.close()
        first = self.proc.stdout.readline().decode(errors="replace")
        marker = "http://127.0.0.1:"
        if marker not in first:
            self.proc.wait(timeout=30)
            raise RuntimeError("the worker's anvil serve did not start (exit %s): %s" % (
                self.proc.returncode, _tail(os.path.join(self.dir, "serve.log"))))
        self.port = int(first.split(marker, 1)[1].split()[0].rstrip("/"))

    def close(self):
        """Its server ended and its folder removed (a bridge that ends on purpose)."""
        import shutil

        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def info(self):
        import ray

        ctx = ray.get_runtime_context()
        return {"node": ray.util.get_node_ip_address(), "node_id": ctx.get_node_id(),
                "gpus": [str(g) for g in ray.get_gpu_ids()], "pid": os.getpid(), "serve_pid": self.proc.pid}

    def evaluate(self, request, key):
        """The worker server's answer for one evaluation, once it is done."""
        if self.proc.poll() is not None:  # ended between evaluations: not this one's doing
            self._start()
        status, sent = self._call("POST", "/v1/evaluations", request, key)
        if status not in (200, 202):
            return {"status": "done", "outcome": "error", "reward": None, "evaluation": None,
                    "message": "the worker's server refused the evaluation (%d): %s" % (status, json.dumps(sent)[:500])}
        while True:
            self._alive()
            status, got = self._call("GET", "/v1/evaluations/%s?wait=30" % sent["id"])
            if status != 200:
                raise RuntimeError("the worker's server answered %d for evaluation %s" % (status, sent["id"]))
            if got.get("status") == "done":
                return got

    def _alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError("the worker's anvil serve ended (exit %s): %s" % (
                self.proc.returncode, _tail(os.path.join(self.dir, "serve.log"))))

    def _call(self, method, path, body=None, key=""):
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=90)
        try:
            headers = {"Content-Type": "application/json", "Authorization": "Bearer " + self.token}
            if key:
                headers["Idempotency-Key"] = key
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()


def _die_with(prctl, parent):
    """In the server's child before exec (a child of a threaded process: nothing is loaded here)."""
    PR_SET_PDEATHSIG, SIGKILL = 1, 9
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    if os.getppid() != parent:  # the actor died before the death signal was set
        os._exit(1)


def _tail(path, n=800):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


class Bridge:
    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()

    def say(self, msg):
        with self.lock:
            self.out.write(json.dumps(msg) + "\n")
            self.out.flush()


def place(ray, a):
    """The worker actors, placed and answering, with what each says of itself; raises with a
    sentence when the cluster cannot hold them."""
    resources = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if a.device == "cuda":
        have = int(resources.get("GPU", 0))
        if have == 0:
            raise RuntimeError("the Ray cluster at %s offers no GPU (its resources: %s); serve CPU variants with "
                               "--device cpu" % (a.address, _resources_text(resources)))
        count = a.workers or have
        if count > have:
            raise RuntimeError("--ray-workers %d: the Ray cluster at %s offers %d GPU(s)" % (count, a.address, have))
        options = {"num_gpus": 1, "num_cpus": 1}
    else:
        count = a.workers or len(nodes)
        have = int(resources.get("CPU", 0))
        if count > have:
            raise RuntimeError("--ray-workers %d: the Ray cluster at %s offers %d CPU(s), one a worker" % (
                count, a.address, have))
        options = {"num_cpus": 1}
    # Ray pickles the actor's class by value: the workers need nothing of anvil's Python.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    remote = ray.remote(max_restarts=-1, max_task_retries=0, **options)(Worker)
    session = "%d-%s" % (os.getpid(), os.urandom(4).hex())

    def make(lane):  # the lane's actor (again, when the one before died for good)
        return remote.options(scheduling_strategy="SPREAD").remote(a.anvil, a.device, a.serve_args,
                                                                    "%s-%d" % (session, lane))

    a.make_actor = make
    actors = [make(i) for i in range(count)]
    refs = [actor.info.remote() for actor in actors]
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=PLACE_TIMEOUT_S)
    if pending:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        raise RuntimeError("%d of %d worker(s) were not placed within %d s: the Ray cluster at %s has %s" % (
            len(pending), count, PLACE_TIMEOUT_S, a.address, _resources_text(resources)))
    infos = ray.get(refs)  # raises the worker's own error (its server did not start)
    return actors, [dict(info, lane=i) for i, info in enumerate(infos)]


def _resources_text(resources):
    return ", ".join("%s %g" % (k, v) for k, v in sorted(resources.items()) if k in ("CPU", "GPU", "memory")) or "none"


def serve(ray, a, bridge, actors, lanes):
    pending = {}  # ObjectRef -> (call, lane)
    pids = [info["pid"] for info in lanes]  # each lane's actor process now: a restarted one has another
    up = [True] * len(actors)  # a lane whose actor is being started again holds its calls
    held = {}  # lane -> calls waiting for it
    mu = threading.Lock()
    wake = threading.Event()
    stdin_done = threading.Event()

    def send(msg):  # under mu
        pending[actors[msg["lane"]].evaluate.remote(msg["request"], msg.get("key", ""))] = (msg["call"], msg["lane"])
        wake.set()

    def revive(lane):
        """The lane's actor started again (Ray restarts it; one that cannot be is made anew),
        answering, before its next call. Its held calls wait (the server's deadline for each call
        ends a wait that lasts)."""
        try:
            ray.kill(actors[lane], no_restart=False)
        except Exception:  # noqa: BLE001 - dead for good: made anew below
            pass
        tries = 0
        while True:
            try:
                info = ray.get(actors[lane].info.remote(), timeout=PLACE_TIMEOUT_S)
                if info["pid"] != pids[lane]:  # not the old process, before the kill reached it
                    break
                e = "the old actor still answers"
            except Exception as err:  # noqa: BLE001 - still restarting, or dead for good
                e = _first_line(err)
            tries += 1
            print("anvil.ray_pool: worker %d not back yet (%s)" % (lane, e), file=sys.stderr)
            if tries % 3 == 0:  # made anew
                try:
                    ray.kill(actors[lane], no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
                actors[lane] = a.make_actor(lane)
            time.sleep(min(30, 0.2 * 2 ** tries))
        pids[lane] = info["pid"]
        bridge.say({"lane_info": dict(info, lane=lane)})
        with mu:
            up[lane] = True
            for msg in held.pop(lane, []):
                send(msg)

    def waiter():
        while True:
            with mu:
                refs = list(pending)
            if not refs:
                if stdin_done.is_set():
                    return
                wake.wait(0.5)
                wake.clear()
                continue
            done, _ = ray.wait(refs, num_returns=1, timeout=0.5)
            for ref in done:
                with mu:
                    call, lane = pending.pop(ref)
                try:
                    bridge.say({"call": call, "result": ray.get(ref)})
                except Exception as e:  # noqa: BLE001 - the actor died, or its server ended: the lane goes on
                    with mu:  # down before the loss is said: the lane's next call waits for the fresh actor
                        was_up, up[lane] = up[lane], False
                    bridge.say({"call": call, "error": "worker %d: %s" % (lane, _first_line(e)), "lost": True})
                    if was_up:  # a fresh actor and server for the lane's next evaluation
                        threading.Thread(target=revive, args=(lane,), daemon=True).start()

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    for line in sys.stdin:
        try:
            msg = json.loads(line)
            lane = msg["lane"]
            msg["call"], msg["request"], actors[lane]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            bridge.say({"error": "bad call: %s" % e})
            continue
        with mu:
            if up[lane]:
                send(msg)
            else:
                held.setdefault(lane, []).append(msg)
    stdin_done.set()


def _unreachable(address, timeout_s=10):
    """Why a host:port address takes no connection ("" when it does, or is not host:port): Ray
    itself would retry an address with no cluster for minutes."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return ""
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        return ""
    except OSError as e:
        return e.strerror or str(e)


def _first_line(e):
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # Ray's errors carry the worker's traceback: its last line says what went wrong.
    return (lines[-1] if lines else type(e).__name__)[:500]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--serve-args", default="[]", help="JSON list: the server's evaluation options, for each worker")
    a = ap.parse_args(argv)
    a.serve_args = json.loads(a.serve_args)
    # The protocol on a descriptor of its own; fd 1 (and sys.stdout) go to stderr, so that nothing
    # Ray or a library prints, in Python or natively, reaches the protocol.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    bridge = Bridge(out)
    try:
        import ray
    except ImportError as e:
        bridge.say({"error": "this Python (%s) cannot import ray: %s (install the cluster's Ray version, or give "
                             "--ray-python)" % (sys.executable, e)})
        return 2
    unreachable = _unreachable(a.address)
    if unreachable:
        bridge.say({"error": "no Ray cluster answers at %s: %s" % (a.address, unreachable)})
        return 2
    try:
        ray.init(address=a.address, namespace="anvil", log_to_driver=False, logging_level="ERROR",
                 configure_logging=False)
    except Exception as e:  # noqa: BLE001 - no cluster there, a version mismatch: said in one line
        bridge.say({"error": "cannot join the Ray cluster at %s: %s" % (a.address, _first_line(e))})
        return 2
    try:
        actors, lanes = place(ray, a)
    except Exception as e:  # noqa: BLE001
        bridge.say({"error": _first_line(e)})
        return 2
    bridge.say({"ready": lanes, "ray": ray.__version__, "protocol": PROTOCOL})
    try:
        serve(ray, a, bridge, actors, lanes)
    finally:
        try:  # each worker's server ended and its folder removed, then the actors
            ray.get([actor.close.remote() for actor in actors], timeout=30)
        except Exception:  # noqa: BLE001 - a worker already gone: killed below all the same
            pass
        for actor in actors:
            ray.kill(actor, no_restart=True)
    return 0


def entry():
    sys.exit(main())


if __name__ == "__main__":
    entry()
