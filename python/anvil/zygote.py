"""A warm runner: a process with torch imported that forks one child per evaluation.

    python -I -c "import sys; sys.path.insert(0, PYDIR); from anvil import zygote; zygote.entry()" \
        --socket PATH --token-file PATH

Importing torch costs seconds; an RL run evaluates millions of candidates, so a
zygote per GPU imports it once (never touching CUDA, which does not survive a
fork) and each evaluation runs in a fresh forked child: its own process group,
limits and network namespace, with CUDA initialised anew. The child runs
`anvil.runner` exactly as a freshly started runner would (request on stdin,
report on fd 3), so the two paths judge alike.

Only anvil may ask: the socket lies in a directory only its user can open, the zygote accepts a
peer of its own uid only (SO_PEERCRED), and every request carries the token anvil wrote for the
zygote at its start (a file beside the socket, readable by that user alone, read by the zygote
through --token-file: never in its environment or command line, which every process it forks, a
candidate's included, can read back from /proc/self); anything else is refused and nothing is run. The environment of an evaluation is exactly the request's `env` (nothing of the
zygote's own, or of whoever started it, leaks in).

Each child is a relay: it makes a new PID namespace and forks the runner as its PID 1 (which dies
with the relay), then waits for it; the client kills the relay's process group, and the runner's
death ends every process of the evaluation, whatever it did to leave the group.

Protocol (one connection per evaluation, JSON lines over a Unix socket):
  client -> {"token": T, "module": "runner"|"vet"|"warm"|"reference_profile", "request": {...the module's
             request...}, "cwd": DIR,
             "env": {NAME: VALUE}, "report_path": FILE, "output_path": FILE,
             "rlimits": {"fsize": N, "core": 0}, "network": false}
            ("module", default "runner": what the child runs, anvil.runner, anvil.vet, anvil.warm or
            anvil.reference_profile; the same
            request and report either way as its fresh process's)
  zygote -> {"pid": PID}                          as soon as the child exists
  zygote -> {"pid": PID, "exit_code": N, "signal": S}  when it has ended
  zygote -> {"pid": PID, "report": true}         once the runner's report is complete
                                                  (before the process has ended)
  zygote -> {"pid": PID, "lock": "waiting"|"held"}  the child begins/ends a wait for the GPU's
                                                  lock (timing.GpuLock): time its limit need not count
The runner says its report is complete by writing one byte to a pipe (its
ANVIL_DONE_FD; before it, "w" and "h" around each wait for the GPU's lock) and closing it;
the client need not wait for the process's
teardown (a CUDA context takes a tenth of a second or more to go) and may kill
the group at once. A runner that dies first leaves no byte: then only the exit
line comes. The client enforces the timeout and memory limit by killing the
child's process group; the zygote only reaps and reports.
"""
import argparse
import hmac
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import threading


_BASE_FDS = frozenset()  # the descriptors the zygote had before serving (torch's, Python's)
DONE_FD = 4


def _close_strays(keep):
    """Close every descriptor but the zygote's own from before serving and `keep`: a child forked
    while another request was being set up must not hold that request's pipe or connection."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd not in keep and fd not in _BASE_FDS:
            try:
                os.close(fd)
            except OSError:
                pass


def _is_open(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _child(msg, done):
    """Runs in the forked child (the relay); never returns."""
    code = 70
    try:
        os.dup2(done, DONE_FD)
        _close_strays({0, 1, 2, DONE_FD})
        os.setpgid(0, 0)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        limits = msg.get("rlimits", {})
        if "fsize" in limits:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits["fsize"], limits["fsize"]))
        if "core" in limits:
            resource.setrlimit(resource.RLIMIT_CORE, (limits["core"], limits["core"]))
        from anvil import confine

        confine.new_pid_namespace(network=bool(msg.get("network")))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in (msg.get("env") or {}).items()})
        os.environ["ANVIL_DONE_FD"] = str(DONE_FD)
        os.chdir(msg["cwd"])
        # The runner's own file descriptors: stdin = the request, 1/2 = output, 3 = report.
        rfd, wfd = os.pipe()
        os.write(wfd, json.dumps(msg["request"]).encode())
        os.close(wfd)
        os.dup2(rfd, 0)
        out = os.open(msg["output_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        rep = os.open(msg["report_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(rep, 3)
        for fd in (rfd, out, rep):
            if fd > DONE_FD:
                os.close(fd)
        runner_pid = os.fork()  # PID 1 of the new namespace
        if runner_pid:
            for fd in (0, 1, 2, 3, DONE_FD):
                try:
                    os.close(fd)
                except OSError:
                    pass
            _, status = os.waitpid(runner_pid, 0)
            code = os.waitstatus_to_exitcode(status)
            if code < 0:  # the runner's death by a signal is the relay's too (the client names it)
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code)
        confine.die_with_parent()
        sys.stdin = os.fdopen(0, "r")
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        code = _MODULES[msg.get("module", "runner")]().main() or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # the runner reports its own failures; this is a zygote fault
        try:
            os.write(2, f"anvil.zygote: child failed: {type(e).__name__}: {e}\n".encode())
        except OSError:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


def _import_compiler(torch):
    """torch.compile's machinery (dynamo, inductor, triton), imported once here: a compile baseline
    in a child then costs its compilation alone (about 1.4 s a KernelBench task with warm caches,
    against 6.7 s in a fresh process: bench/results/kb-baselines-2026-11-27/). Importing
    inductor asks whether CUDA is available; anvil's runner environment sets
    PYTORCH_NVML_BASED_CUDA_CHECK=1 (launch.cpp), so that NVML answers and the driver is not
    started (a child forked after that would have no CUDA). Without it, or without NVML, only
    dynamo is imported."""
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 - a torch without it: the baseline says so when asked
        return
    nvml = getattr(torch.cuda, "_device_count_nvml", None)
    if not torch.backends.cuda.is_built():
        pass  # no driver to start
    elif os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") != "1" or nvml is None or nvml() < 0:
        return
    try:
        import torch._inductor.async_compile  # noqa: F401
        import torch._inductor.codecache  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001
        return
    _warm_compiler()


def _compile_modules():
    """compile_modules.txt's names (the modules torch.compile's first call imports lazily)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_modules.txt")) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def _warm_compiler():
    """What torch.compile's first call pays once a process without the GPU, paid here once before
    any fork: inductor's cache keys hash torch's and Triton's sources (torch_key, triton_key), and
    the modules a compilation imports lazily (compile_modules.txt) are imported. On an H100 this
    took the first call of a KernelBench L1/L2 problem's compile baseline from 1.0-1.2 s to
    0.14-0.35 s, caches warm (bench/results/kb-profiler-2026-11-27/). A module that fails to import
    is left to the compilation, which says why; none of them starts CUDA (the zygote checks)."""
    import importlib

    try:
        from torch._inductor import codecache
        from torch._inductor.runtime.triton_compat import triton_key

        codecache.torch_key()
        triton_key()
    except Exception:  # noqa: BLE001 - a torch or Triton without them: the compilation computes its own
        pass
    for name in _compile_modules():
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass


def _children_have_cuda(torch):
    """Whether a child forked now can start CUDA: torch marks a fork "bad" once this process has
    started the driver (torch.cuda.device_count() does, before is_initialized() says so), and every
    evaluation in such a child would fail."""
    in_bad_fork = getattr(torch._C, "_cuda_isInBadFork", None)
    if in_bad_fork is None:  # a torch without CUDA
        return True
    pid = os.fork()
    if pid == 0:
        os._exit(1 if in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _runner():
    from anvil import runner

    return runner


def _vet():
    from anvil import vet

    return vet


def _warm():
    from anvil import warm

    return warm


def _reference_profile():
    from anvil import reference_profile

    return reference_profile


# What a child may run: an evaluation (the default), a task's vetting, the warming of its compile
# caches or the profile of its reference, each reading its request on stdin and writing its report
# to fd 3 (docs/vet.md).
_MODULES = {"runner": _runner, "vet": _vet, "warm": _warm, "reference_profile": _reference_profile}

_active = 0
_last_active = 0.0
_lock = threading.Lock()


def _touch(delta):
    global _active, _last_active
    import time

    with _lock:
        _active += delta
        _last_active = time.monotonic()


def _idle_watchdog(idle_exit):
    """Ends the zygote after idle_exit seconds without a request or a running child."""
    import time

    while True:
        time.sleep(min(5.0, idle_exit))
        with _lock:
            if _active == 0 and time.monotonic() - _last_active > idle_exit:
                os._exit(0)


def _serve_one(conn):
    _touch(+1)
    try:
        _serve(conn)
    finally:
        _touch(-1)


_TOKEN = b""


def _peer_uid(conn):
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def _authentic(conn, msg):
    """Whether a request comes from anvil: a peer of this uid with the token."""
    if _peer_uid(conn) != os.getuid():
        return False
    token = msg.get("token") if isinstance(msg, dict) else None
    return isinstance(token, str) and bool(_TOKEN) and hmac.compare_digest(token.encode(), _TOKEN)


def _end_group(pid):
    """Kills a child's process group (the relay's: the runner and what it started), as the client would."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _serve(conn):
    with conn:
        f = conn.makefile("rwb", buffering=0)
        line = f.readline(1 << 24)
        if not line:
            return
        try:
            msg = json.loads(line)
        except json.JSONDecodeError as e:
            f.write((json.dumps({"error": f"bad request: {e}"}) + "\n").encode())
            return
        if not _authentic(conn, msg):
            f.write((json.dumps({"error": "refused: not anvil (peer uid or token)"}) + "\n").encode())
            return
        if msg.get("module", "runner") not in _MODULES:
            f.write((json.dumps({"error": "bad request: module %r (one of %s)" % (
                msg.get("module"), ", ".join(sorted(_MODULES)))}) + "\n").encode())
            return
        done_r, done_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as e:  # the host's memory (a zygote's fork commits its size): anvil starts a fresh process
            os.close(done_r)
            os.close(done_w)
            f.write((json.dumps({"error": "cannot fork: %s" % e}) + "\n").encode())
            return
        if pid == 0:
            _child(msg, done_w)
        os.close(done_w)
        said = b""
        waiting, told = False, 0  # the child's wait for the GPU's lock, as passed on
        watch = select.poll()  # (not select(): descriptors above 1024)
        watch.register(done_r, select.POLLIN)
        watch.register(conn.fileno(), select.POLLIN)
        try:
            f.write((json.dumps({"pid": pid}) + "\n").encode())
        except OSError:  # the client is gone already (killed while this forked): so is the child
            watch.unregister(conn.fileno())
            _end_group(pid)
        while True:  # until every write end is closed: the runner's, after its report, or at its death
            ready = dict(watch.poll())
            if conn.fileno() in ready:  # the client says nothing more: readable means it is gone (killed, say)
                try:
                    gone = conn.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                watch.unregister(conn.fileno())  # (a client that wrote more is not watched further)
                if gone:  # nobody is left to end the child at its time limit: it ends now
                    _end_group(pid)
                continue
            chunk = os.read(done_r, 64)
            if not chunk:
                break
            for byte in chunk:  # "w"/"h": a wait for the GPU's lock begins/ends; "1": the report
                if byte in b"wh":
                    if (byte == ord("w")) != waiting and told < 16:  # changes only, a few (the client
                        waiting, told = byte == ord("w"), told + 1  # counts the judge's first two)
                        try:
                            f.write((json.dumps({"pid": pid, "lock": "waiting" if waiting else "held"})
                                     + "\n").encode())
                        except OSError:
                            pass
                elif len(said) < 2:  # more than one byte is no report already
                    said += bytes([byte])
        os.close(done_r)
        if said == b"1":
            try:
                f.write((json.dumps({"pid": pid, "report": True}) + "\n").encode())
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
        result = {"pid": pid, "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                  "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}
        try:
            f.write((json.dumps(result) + "\n").encode())
        except OSError:
            pass  # the client gave up; the child is reaped all the same


def main(argv=None):
    global _TOKEN
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--token-file", required=True, help="the file holding the token every request must carry")
    ap.add_argument("--idle-exit", type=float, default=0, help="exit after this many idle seconds (0: never)")
    a = ap.parse_args(argv)
    try:
        with open(a.token_file, "rb") as f:
            _TOKEN = f.read().strip()
    except OSError as e:
        print("anvil.zygote: cannot read the token file %s: %s: refusing to serve" % (a.token_file, e.strerror),
              file=sys.stderr)
        return 2
    if not _TOKEN:
        print("anvil.zygote: the token file %s is empty: refusing to serve" % a.token_file, file=sys.stderr)
        return 2
    # Everything the runner imports, imported once here (no CUDA initialisation).
    import torch  # noqa: F401
    import torch.nn  # noqa: F401
    import anvil.runner  # noqa: F401
    import anvil.output_compare  # noqa: F401
    import anvil.timing  # noqa: F401
    import anvil.judge  # noqa: F401 - and the defended runner's
    import anvil.candidate  # noqa: F401
    import anvil.batch  # noqa: F401
    import anvil.confine  # noqa: F401
    import anvil.findings  # noqa: F401
    import anvil.load_inline  # noqa: F401
    import anvil.static_check  # noqa: F401
    import anvil.vet  # noqa: F401 - and a vetting's
    import anvil.warm  # noqa: F401
    import anvil.task_probe  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    _import_compiler(torch)
    assert not torch.cuda.is_initialized(), "the zygote must not initialise CUDA before forking"
    if not _children_have_cuda(torch):
        print("anvil.zygote: CUDA was started while importing (a child would have none): refusing to serve",
              file=sys.stderr)
        return 2
    from anvil import confine

    # Non-dumpable, as its children (runner, judge, candidate's process) then are from birth: no
    # other process of this user can open /proc/ZYGOTE/fd (a request's report pipe) or ptrace them.
    confine.non_dumpable()
    global _BASE_FDS
    _BASE_FDS = frozenset(fd for fd in (int(n) for n in os.listdir("/proc/self/fd")) if _is_open(fd))
    if os.path.exists(a.socket):
        os.unlink(a.socket)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket itself: its user only
    try:
        srv.bind(a.socket)
    finally:
        os.umask(old)
    srv.listen(64)
    print(json.dumps({"ready": a.socket, "pid": os.getpid()}), flush=True)
    _touch(0)
    if a.idle_exit > 0:
        threading.Thread(target=_idle_watchdog, args=(a.idle_exit,), daemon=True).start()
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


def entry():
    sys.exit(main())


if __name__ == "__main__":
    entry()
