"""`anvil serve` under load (issue 18's bars): many clients submitting the bundled candidates at
once, the server killed with SIGKILL part-way and restarted on the same state, and then:

- every accepted request answered, none twice (each idempotency key has one id, each id one result);
- latency per call kind (the server's own histograms) and, per evaluation, accepted-to-done p50/p99;
- each GPU's utilization (nvidia-smi, every 0.5 s) and the share of time each lane's device was held
  by an evaluation, while work was queued; and, with `--overlap` above 1, the share of that time
  each GPU's lock was held exclusive (an evaluation's candidate loaded, verified or timed with the
  GPU to itself) and held at all (shared: a wave preparing), as the kernel's /proc/locks shows it
  every 50 ms: observed, not reported;
- throughput against the same evaluations run one after another with `anvil eval`, and (--bench
  COPIES) against `anvil bench` over the same candidates (COPIES of each pair, the server's
  --overlap and --gpus) run after the load on the same host;
- the service's overhead over a direct `anvil eval` of one cached candidate (medians of N each).

    python3 bench/serve_load.py --device cuda --clients 64 --duration 300 --kill-at 150 --out r.json
    python3 bench/serve_load.py --device cpu --clients 4 --duration 40 --kill-at 20   # a CPU run
    python3 bench/serve_load.py --sessions ...   # each client drives sessions instead (below)
    python3 bench/serve_load.py --server-args "--gpus 0,1" ...   # a server over two GPUs (issue 24)

With --sessions each client plays a rollout worker: it opens a session, asks a model for each turn
(tests/replay_server.py, one per pair, scripted: the bundled candidate's files written, compile,
verify, profile, finish), runs the turn's tool calls through the session, sends their results back
as tool messages, and finalizes; the session's final evaluation is its answer. A tool call cut off
by the kill is sent again once the server is back (these scripted calls are safe to repeat). The
throughput's baseline is the same sessions run one at a time on the same server.

Prints one JSON document (also to --out) and a few summary lines on stderr.
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ANVIL, ROOT, fingerprint, median  # noqa: E402
from anvil.client import Client, ServeError  # noqa: E402
import urllib.request  # noqa: E402

PAIRS = ["01_elementwise_chain", "02_softmax", "03_layernorm", "04_gemm_bias_relu", "05_conv_bias_relu",
         "06_mlp_block"]


def pct(xs, q):
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 4) if s else None


class Server:
    def __init__(self, state, device, extra, server_extra):
        self.state, self.device, self.extra, self.server_extra = state, device, extra, server_extra
        self.proc, self.url = None, None

    def start(self):
        self.proc = subprocess.Popen([ANVIL, "serve", "--port", str(getattr(self, "port", 0)), "--device", self.device,
                                      "--state", self.state] + self.extra + self.server_extra,
                                     stdout=subprocess.PIPE, stderr=open(self.state + ".stderr", "a"), text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        m = re.match(r"anvil serve: (http://127\.0\.0\.1:(\d+)) ", line)
        if not m:
            raise RuntimeError("the server did not start: %r (see %s.stderr)" % (line, self.state))
        self.url, self.port = m.group(1), int(m.group(2))  # a restart takes the same port
        return self.url

    def kill9(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=900)


def cache_root():
    """anvil's cache, as anvil finds it (src/anvil/env/toolchain.cpp default_cache_dir)."""
    if os.environ.get("ANVIL_CACHE"):
        return os.path.abspath(os.environ["ANVIL_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "anvil")
    return os.path.join(os.path.expanduser("~"), ".cache", "anvil")


class LockSampler(threading.Thread):
    """Every 50 ms, how each GPU's lock (CACHE/locks/gpuN.lock, the GPU's lock of docs/runner-protocol.md)
    is held, read from the kernel's /proc/locks (no lock taken, nothing asked of anvil): (time, {GPU
    index: "exclusive", "shared" or None}) samples. Exclusive: an evaluation's candidate loaded,
    verified or timed, or a process's CUDA context ended, with the GPU to itself; shared: a wave
    preparing (CUDA started in the judge's and the candidate's processes, the reference placed)."""

    def __init__(self, cache):
        super().__init__(daemon=True)
        self.dir, self.samples, self.stop = os.path.join(cache, "locks"), [], threading.Event()

    def files(self):
        out = {}
        try:
            for name in os.listdir(self.dir):
                m = re.fullmatch(r"gpu(\d+)\.lock", name)
                if m:
                    st = os.stat(os.path.join(self.dir, name))
                    out["%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = int(m.group(1))
        except OSError:
            pass
        return out

    def run(self):
        files, looked = {}, 0.0
        while not self.stop.is_set():
            now = time.time()
            if now - looked > 1.0:
                files, looked = self.files(), now
            held = {g: None for g in files.values()}
            try:
                with open("/proc/locks") as f:
                    for line in f:
                        parts = line.split()
                        # "N: FLOCK ADVISORY WRITE|READ PID MAJ:MIN:INODE 0 EOF"; a waiter's has "->" after N:
                        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] in files:
                            g = files[parts[5]]
                            if parts[3] == "WRITE":
                                held[g] = "exclusive"
                            elif parts[3] == "READ" and held[g] is None:
                                held[g] = "shared"
            except OSError:
                return
            self.samples.append((now, held))
            time.sleep(0.05)


class GpuSampler(threading.Thread):
    """nvidia-smi's utilization.gpu of every GPU every 0.5 s: (time, GPU index, percent) samples."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        try:
            p = subprocess.Popen(["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                                  "-lms", "500"], stdout=subprocess.PIPE, text=True)
        except FileNotFoundError:
            return
        for line in p.stdout:
            if self.stop.is_set():
                break
            try:
                i, u = line.split(",")
                self.samples.append((time.time(), int(i), float(u)))
            except ValueError:
                pass
        p.kill()


def requests_for(device, task_dir):
    return [({"path": os.path.join(task_dir, p + ".py")},
             {"path": os.path.join(ROOT, "examples", "candidates", p, device)}) for p in PAIRS
            if os.path.isdir(os.path.join(ROOT, "examples", "candidates", p, device))]


async def client_loop(url, reqs, k, deadline, log):
    """One client: evaluations one after another until the deadline; each one's key, id, result."""
    async with Client(url, timeout=120) as c:
        n = 0
        while time.time() < deadline:
            task, cand = reqs[(k + n) % len(reqs)]
            key = "c%d-%d" % (k, n)
            t0 = time.time()
            try:
                eid = await c.submit(task, cand, {"seed": k * 1000 + n}, key=key)
                r = await c.wait(eid, limit=900)
                log.append({"key": key, "id": eid, "status": r["status"], "outcome": r.get("outcome"),
                            "attempts": r.get("attempts"), "latency_s": time.time() - t0, "done_at": time.time()})
            except (ServeError, OSError) as e:
                log.append({"key": key, "id": None, "error": str(e)[:200], "latency_s": time.time() - t0})
            n += 1


def start_replay(pair, device, workdir):
    """A replay model server for one pair: its candidate's files written, compile, verify, profile,
    finish. Its URL."""
    cand = os.path.join(ROOT, "examples", "candidates", pair, device)
    files = {os.path.relpath(os.path.join(d, f), cand): open(os.path.join(d, f)).read()
             for d, _, fs in os.walk(cand) for f in fs if "__pycache__" not in d}
    script = {"turns": [{"content": "writing the kernels",
                         "tool_calls": [{"name": "write_file", "arguments": {"path": p, "content": t}}
                                        for p, t in sorted(files.items())]},
                        {"content": None, "tool_calls": [{"name": "compile", "arguments": {}}]},
                        {"content": None, "tool_calls": [{"name": "verify", "arguments": {}}]},
                        {"content": None, "tool_calls": [{"name": "profile", "arguments": {}}]},
                        {"content": "done", "tool_calls": [{"name": "finish", "arguments": {}}]}]}
    path = os.path.join(workdir, pair + ".json")
    json.dump(script, open(path, "w"))
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "replay_server.py"), "--script", path,
                          "--port", "0"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline()
    return p, "http://127.0.0.1:%d/v1" % int(line.split()[1])


def chat(model_url, messages, tools):
    req = urllib.request.Request(model_url + "/chat/completions", method="POST", data=json.dumps(
        {"model": "replay", "messages": messages, "tools": tools}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["choices"][0]["message"]


async def one_session(c, task, model_url, seed, calls_log):
    """One scripted episode through a session; (its final result, tool calls sent again)."""
    s = await c.create_session(task, {"seed": seed})
    messages, resent = list(s["messages"]), 0
    for _ in range(20):
        msg = await asyncio.to_thread(chat, model_url, messages, s["tools"])
        calls = msg.get("tool_calls") or []
        messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": calls})
        if not calls:
            break
        req = [{"name": tc["function"]["name"], "arguments": tc["function"]["arguments"], "id": tc["id"]}
               for tc in calls]
        for attempt in range(60):
            t0 = time.time()
            try:
                results = await c.call_tools(s["id"], req)
                break
            except (OSError, ServeError) as e:  # the server killed mid-call: the same calls once it is back
                if isinstance(e, ServeError) and e.status < 500:
                    raise
                resent += 1
                await asyncio.sleep(1.0)
        calls_log.append({"kind": "calls:" + "+".join(sorted({r["name"] for r in req})), "s": time.time() - t0})
        messages += [{"role": "tool", "tool_call_id": r["id"], "content": r["content"]} for r in results]
        if any(r["finish"] for r in results):
            break
    t0 = time.time()
    final = await c.finalize(s["id"], limit=900)
    calls_log.append({"kind": "finalize", "s": time.time() - t0})
    await c.end_session(s["id"])
    return s["id"], final, resent


async def session_loop(url, reqs, models, k, deadline, log, calls_log):
    """One client: sessions one after another until the deadline."""
    async with Client(url, timeout=120) as c:
        n = 0
        while time.time() < deadline:
            i = (k + n) % len(reqs)
            t0 = time.time()
            try:
                sid, r, resent = await one_session(c, reqs[i][0], models[i], k * 1000 + n, calls_log)
                log.append({"key": sid, "id": r.get("id"), "status": r["status"], "outcome": r.get("outcome"),
                            "reward": r.get("reward"), "attempts": r.get("attempts"), "resent_calls": resent,
                            "latency_s": time.time() - t0, "done_at": time.time()})
            except (ServeError, OSError) as e:
                log.append({"key": "c%d-%d" % (k, n), "id": None, "error": str(e)[:200], "latency_s": time.time() - t0})
            n += 1


async def metrics_loop(url, deadline, depth, stop):
    """Every second: the queue's depth plus the tool calls waiting for a device (to know when it
    was saturated), and the seconds each lane's device has been held (anvil_device_held_seconds_total,
    {lane: seconds})."""
    async with Client(url) as c:
        while time.time() < deadline + 5 or not stop.is_set():
            try:
                m = await c.metrics()
                q = re.search(r"^anvil_queue_depth (\d+)", m, re.M)
                w = re.search(r"^anvil_tool_calls_waiting (\d+)", m, re.M)
                held = {k: float(v) for k, v in
                        re.findall(r'^anvil_device_held_seconds_total\{lane="([^"]*)"\} ([0-9.]+)', m, re.M)}
                depth.append((time.time(), int(q.group(1)) + (int(w.group(1)) if w else 0) if q else None,
                              held or None))
            except Exception:  # noqa: BLE001 - the server is down for its restart
                depth.append((time.time(), None, None))
            await asyncio.sleep(1.0)


def direct_eval(device, task, cand, seed, extra):
    t0 = time.time()
    r = subprocess.run([ANVIL, "eval", "--json", "--device", device, "--task", task["path"], "--candidate",
                        cand["path"], "--seed", str(seed)] + extra, capture_output=True, text=True)
    wall = time.time() - t0
    try:
        return wall, json.loads(r.stdout).get("outcome")
    except json.JSONDecodeError:
        return wall, "no result: " + r.stderr[-200:]


def bench_same(a, reqs, extra):
    """`anvil bench` over COPIES of each pair's task and candidate (a suite made here), on the
    server's GPUs with its --overlap, the evaluation settings the same: its results' throughput."""
    root = tempfile.mkdtemp(prefix="serve-load-bench-")
    k = 0
    for copy in range(a.bench):
        for task, cand in reqs:
            k += 1
            name = "%d_%s" % (k, os.path.basename(task["path"])[:-3].split("_", 1)[1])
            os.makedirs(os.path.join(root, "tasks", "level1"), exist_ok=True)
            with open(task["path"]) as f, open(os.path.join(root, "tasks", "level1", name + ".py"), "w") as g:
                g.write(f.read())
            shutil.copytree(cand["path"], os.path.join(root, "solutions", "level1", name, a.device))
    argv = [ANVIL, "bench", "--tasks", os.path.join(root, "tasks"), "--solutions", os.path.join(root, "solutions"),
            "--out", os.path.join(root, "run"), "--no-progress", "--device", a.device, "--json"] + extra
    sa = a.server_args.split()
    for flag in ("--gpus", "--overlap"):
        if flag in sa:
            argv += [flag, sa[sa.index(flag) + 1]]
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True)
    shutil.rmtree(root, ignore_errors=True)
    try:
        run = json.loads(r.stdout)["run"]
    except (json.JSONDecodeError, KeyError):
        return {"error": "anvil bench: exit %d: %s" % (r.returncode, r.stderr[-300:])}
    return {"tasks": k, "wall_s": round(time.time() - t0, 1), "seconds": run.get("seconds"),
            "tasks_per_minute": run.get("tasks_per_minute"), "overlap": run.get("overlap"), "gpus": run.get("gpus"),
            "exit": r.returncode}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--kill-at", type=float, default=None, help="seconds in: SIGKILL the server, restart it")
    ap.add_argument("--overhead-runs", type=int, default=10)
    ap.add_argument("--tasks", default=os.path.join(ROOT, "examples", "tasks"))
    ap.add_argument("--eval-args", default="", help="evaluation settings for the server and the direct runs")
    ap.add_argument("--server-args", default="", help="the server's own flags (e.g. --gpus 0,1)")
    ap.add_argument("--no-sequential", action="store_true", help="skip the one-at-a-time baseline")
    ap.add_argument("--sessions", action="store_true", help="clients drive scripted sessions (see above)")
    ap.add_argument("--bench", type=int, default=0, metavar="COPIES",
                    help="after the load, `anvil bench` over COPIES of each pair (the server's --gpus and --overlap)")
    ap.add_argument("--out")
    a = ap.parse_args()
    extra = a.eval_args.split()
    reqs = requests_for(a.device, a.tasks)
    replays, models = [], []
    if a.sessions:
        scripts = tempfile.mkdtemp(prefix="serve-load-scripts-")
        for p in PAIRS[:len(reqs)]:
            proc, model_url = start_replay(p, a.device, scripts)
            replays.append(proc)
            models.append(model_url)
    state = tempfile.mkdtemp(prefix="serve-load-") + "/state"
    srv = Server(state, a.device, extra, a.server_args.split())
    doc = {"fingerprint": fingerprint(), "device": a.device, "clients": a.clients, "duration_s": a.duration,
           "kill_at_s": a.kill_at, "pairs": [p for p in PAIRS][:len(reqs)], "eval_args": extra,
           "server_args": a.server_args.split(),
           "mode": "sessions" if a.sessions else "evaluations"}
    url = srv.start()

    # The service's overhead over a direct `anvil eval` of one cached candidate (warmed once each).
    task, cand = reqs[0]

    async def one(seed):
        async with Client(url) as c:
            t0 = time.time()
            r = await c.evaluate(task, cand, {"seed": seed}, limit=900)
            return time.time() - t0, r.get("outcome")

    asyncio.run(one(1))
    if a.overhead_runs > 0:
        direct_eval(a.device, task, cand, 1, extra)
        served = [asyncio.run(one(100 + i)) for i in range(a.overhead_runs)]
        direct = [direct_eval(a.device, task, cand, 100 + i, extra) for i in range(a.overhead_runs)]
        doc["overhead"] = {"served_s": [round(s, 4) for s, _ in served],
                           "direct_s": [round(s, 4) for s, _ in direct],
                           "outcomes": sorted({o for _, o in served + direct}),
                           "median_overhead_ms": round(1000 * (median([s for s, _ in served]) -
                                                               median([s for s, _ in direct])), 1)}

    # Throughput one after another, the baseline of the load's: `anvil eval` of each pair in turn,
    # or (sessions) each pair's session alone on the server.
    calls_log = []
    t0 = time.time()
    if a.no_sequential:
        seq = None
    elif a.sessions:
        async def sequential():
            async with Client(url) as c:
                return [await one_session(c, reqs[i][0], models[i], 7, []) for i in range(len(reqs))]
        seq = asyncio.run(sequential())
    else:
        seq = [direct_eval(a.device, t, c, 7, extra) for t, c in reqs]
    if seq is not None:
        doc["sequential"] = {"evaluations" if not a.sessions else "sessions": len(seq),
                             "seconds": round(time.time() - t0, 2), "per_minute": round(60 * len(seq) / (time.time() - t0), 2)}

    # The load, with a SIGKILL and a restart part-way.
    log, depth = [], []
    sampler = GpuSampler()
    sampler.start()
    locks = LockSampler(cache_root())
    locks.start()
    start = time.time()
    deadline = start + a.duration

    stop = threading.Event()

    async def load():
        import concurrent.futures
        # Every client's calls run in threads (urllib): enough of them that none waits for one.
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(4 * a.clients + 16))
        tasks = [asyncio.create_task(session_loop(url, reqs, models, k, deadline, log, calls_log) if a.sessions
                                     else client_loop(url, reqs, k, deadline, log)) for k in range(a.clients)]
        sampler_task = asyncio.create_task(metrics_loop(url, deadline, depth, stop))
        if a.kill_at is not None:
            await asyncio.sleep(a.kill_at)
            srv.kill9()
            doc["killed_at_s"] = round(time.time() - start, 2)
            await asyncio.to_thread(srv.start)
            doc["restarted_after_s"] = round(time.time() - start - doc["killed_at_s"], 2)
        await asyncio.gather(*tasks)
        stop.set()
        await sampler_task

    asyncio.run(load())
    sampler.stop.set()
    locks.stop.set()
    end = time.time()

    async def final_metrics():
        async with Client(url) as c:
            return await c.metrics()

    metrics = asyncio.run(final_metrics())
    srv.stop()
    for p in replays:
        p.kill()

    by_key = {}
    for e in log:
        by_key.setdefault(e["key"], set()).add(e["id"])
    done = [e for e in log if e.get("status") == "done"]
    lat = [e["latency_s"] for e in done]
    saturated = [t for t, d, _ in depth if d]
    busy = {}  # GPU index: utilization samples while work was queued
    for t, i, u in sampler.samples:
        if saturated and saturated[0] <= t <= saturated[-1]:
            busy.setdefault(i, []).append(u)
    # Each lane's device held by an evaluation (a lane's or a session tool's), over the seconds the
    # queue was not empty (pairs of samples on one server: the counters restart with it).
    held, wall = {}, 0.0
    for (t0, d0, h0), (t1, d1, h1) in zip(depth, depth[1:]):
        if d0 and h0 and h1 and all(h1.get(k, -1) >= v for k, v in h0.items()):
            for k, v in h0.items():
                held[k] = held.get(k, 0.0) + h1[k] - v
            wall += t1 - t0
    # The seconds work was queued (between two metrics samples that both saw some), and what the
    # GPUs' locks and the finished evaluations did in them.
    spans = [(t0, t1) for (t0, d0, _), (t1, d1, _) in zip(depth, depth[1:]) if d0 and d1]

    def queued(t):
        return any(t0 <= t < t1 for t0, t1 in spans)

    if "--overlap 1" not in " ".join(a.server_args.split()) and not any(h for _, h in locks.samples):
        print("no GPU lock file seen under %s: the exclusive share is not measured" % locks.dir, file=sys.stderr)
    exclusive, taken = {}, {}
    for t, held_now in locks.samples:
        if queued(t):
            for g, h in held_now.items():
                exclusive.setdefault(g, []).append(h == "exclusive")
                taken.setdefault(g, []).append(h is not None)
    span_s = sum(t1 - t0 for t0, t1 in spans)
    done_queued = sum(1 for e in done if queued(e["done_at"]))
    doc["load"] = {
        "submitted": len(log), "done": len(done), "error_count": sum(1 for e in log if "error" in e),
        "errors": [e["error"] for e in log if "error" in e][:10],
        "not_done": [e for e in log if e.get("id") and e.get("status") != "done"][:10],
        "keys_with_two_ids": [k for k, ids in by_key.items() if len(ids) > 1],
        "outcomes": {o: sum(1 for e in done if e["outcome"] == o) for o in sorted({e["outcome"] for e in done})},
        "rerun_after_kill": sum(1 for e in done if (e.get("attempts") or 0) > 1),
        "latency_p50_s": pct(lat, 0.5), "latency_p99_s": pct(lat, 0.99),
        "per_minute": round(60 * len(done) / (end - start), 2),
        "gpu_util_while_queued_mean": {str(i): round(sum(u) / len(u), 1) for i, u in sorted(busy.items())},
        "gpu_util_samples": {str(i): len(u) for i, u in sorted(busy.items())},
        "device_held_while_queued": {k: round(v / wall, 3) for k, v in sorted(held.items())} if wall else None,
        "gpu_exclusive_while_queued": {str(g): round(sum(v) / len(v), 3) for g, v in sorted(exclusive.items()) if v},
        "gpu_exclusive_samples": {str(g): len(v) for g, v in sorted(exclusive.items())},
        "gpu_lock_held_while_queued": {str(g): round(sum(v) / len(v), 3) for g, v in sorted(taken.items()) if v},
        "per_minute_while_queued": round(60 * done_queued / span_s, 2) if span_s else None,
        "queued_seconds": round(wall, 1),
    }
    if a.sessions:
        kinds = sorted({e["kind"] for e in calls_log})
        doc["load"]["client_latency_s"] = {k: {"n": sum(1 for e in calls_log if e["kind"] == k),
                                               "p50": pct([e["s"] for e in calls_log if e["kind"] == k], 0.5),
                                               "p99": pct([e["s"] for e in calls_log if e["kind"] == k], 0.99)}
                                           for k in kinds}
        doc["load"]["resent_calls"] = sum(e.get("resent_calls", 0) for e in done)
        doc["load"]["rewards"] = {str(r): sum(1 for e in done if e.get("reward") == r)
                                  for r in sorted({e.get("reward") for e in done}, key=str)}
        if "sequential" in doc:
            doc["load"]["vs_sequential"] = round(doc["load"]["per_minute"] / doc["sequential"]["per_minute"], 3)
    doc["server_histograms"] = [l for l in metrics.splitlines() if l.startswith("anvil_request_seconds_")
                                and ('le="+Inf"' in l or "_sum" in l)]
    if a.bench:
        doc["bench"] = bench_same(a, reqs, extra)
        if doc["bench"].get("tasks_per_minute") and doc["load"]["per_minute_while_queued"] and not a.sessions:
            doc["load"]["vs_bench"] = round(doc["load"]["per_minute_while_queued"] / doc["bench"]["tasks_per_minute"], 3)
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")
    ld = doc["load"]
    if "overhead" in doc:
        print("overhead: median %s ms (served %s s, direct %s s)" % (
            doc["overhead"]["median_overhead_ms"], median(doc["overhead"]["served_s"]),
            median(doc["overhead"]["direct_s"])), file=sys.stderr)
    if "sequential" in doc:
        print("sequential: %s/min" % doc["sequential"]["per_minute"], file=sys.stderr)
    print("load: %d done of %d submitted (%d errors, %d keys with two ids, %d run again after the kill), %s/min, "
          "p50 %s s p99 %s s; GPU utilization while queued %s%% (by index); device held by an evaluation %s of "
          "that time (by lane); GPU lock held exclusive %s of it, held at all (a wave preparing, shared) %s" % (
              ld["done"], ld["submitted"], ld["error_count"], len(ld["keys_with_two_ids"]), ld["rerun_after_kill"],
              ld["per_minute"], ld["latency_p50_s"], ld["latency_p99_s"], ld["gpu_util_while_queued_mean"],
              ld["device_held_while_queued"], ld["gpu_exclusive_while_queued"], ld["gpu_lock_held_while_queued"]),
          file=sys.stderr)
    if "bench" in doc:
        print("anvil bench on the same candidates: %s; the load while queued %s/min (%s of bench)" % (
            doc["bench"], ld["per_minute_while_queued"], ld.get("vs_bench")), file=sys.stderr)


if __name__ == "__main__":
    main()
