"""The candidate's process: the only place candidate code runs (docs/anti-hacking.md).

The judge (anvil.runner) forks this process before either initialises CUDA and talks to it over
anvil.channel. Here, in order:
  1. confine the process (anvil.sandbox: read-only filesystem, no capabilities);
  2. load the task (trusted code), make its half of the trials' inputs on the host (sent to the
     judge, which makes the other half: channel.SharedInputs), set up the device once the judge's
     is (two CUDA contexts made at once each take longer), warm the harness's own instruments, and
     receive the judge's half, all before any candidate code exists;
  3. capture the fingerprint of the judging code and the thread list, then import model_new.py
     (load_inline builds are asked of the judge), construct ModelNew, load Model's weights;
  4. verification calls: each under the op recorder, which also fills every tensor the candidate
     allocates through torch with NaN sentinels (all bytes 0xFF); after each call, before the
     output leaves, the checks that need this process (threads still running, judging code
     replaced, an output that is not a plain tensor, an input it modified), then the output is
     sent to the judge, which compares it with its own reference;
  5. when the judge says go (its GPU is idle), timing: fresh inputs for every call, the timed calls
     under the profiler (anvil.timing.profiled_samples) and the recorder, each call's sample sent
     to the judge at once (and its whole output when the judge asks for it), the trace summarised
     for the judge.
This process decides nothing: it sends what it saw; the judge decides and writes the report.
"""
import os
import sys
import time

from anvil import channel, policy, sandbox, timing

POISONED_OPS = frozenset(["empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                          "empty_permuted"])
_type = type
_Tensor = None  # torch.Tensor, captured after import


class Stop(Exception):
    """Ends this process's work after a message that ends the evaluation was sent."""


def _maps():
    """Paths of the shared objects mapped into this process."""
    out = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and ".so" in parts[5]:
                    out.add(parts[5].strip())
    except OSError:
        pass
    return out


class CandidateSide:
    def __init__(self, runner, sock):
        self.ev = runner          # a runner.Evaluation used for the task helpers (not the judge's)
        self.sock = sock
        self.recorder = None
        self.poison = False
        self.clock = timing.Clock()

    # -- messages ---------------------------------------------------------------------------
    def send(self, message, value=None):
        channel.send(self.sock, message, value)

    def send_output(self, message, value):
        """An output to the judge: CUDA tensors through CUDA IPC (their memory stays untouched until
        the judge says it has its copy), the rest through a sealed memfd."""
        shared = channel.send(self.sock, message, value, ipc=self.ev.device.type == "cuda")
        reply = channel.recv(self.sock)
        del shared
        return reply

    def fail(self, outcome, message, detail="", reason=None):
        self.send({"type": "fail", "outcome": outcome, "message": message, "detail": detail, "reason": reason})
        raise Stop()

    def hack(self, reason, message, evidence=None):
        self.send({"type": "hack", "reason": reason, "message": message, "evidence": evidence or {}})
        raise Stop()

    # -- setup ------------------------------------------------------------------------------
    def run(self):
        global _Tensor
        from anvil.runner import Outcome

        clock = self.clock
        clock.mark("started")
        with clock("confine"):
            confinement = sandbox.confine(keep_visible=self.ev.visible_paths())
        os.environ["HOME"] = os.environ.get("TMPDIR", "/tmp")
        ev = self.ev
        try:
            with clock("setup"):
                import torch
                import torch._dynamo  # noqa: F401 - it re-wraps torch functions on import: before the fingerprint

                _Tensor = torch.Tensor
                self.torch = ev.torch = torch
                ev.load_task()
                with clock("host_inputs"):  # this side's half, made and sent while the judge starts CUDA
                    ev.shared.make_mine(ev)
                with clock("device_wait"):
                    ev.shared.wait_device_ready()
                with clock("device"):
                    ev.setup()
                ev.build_reference()  # Model's weights, for load_state_dict (the judge keeps its own)
                with clock("inputs"):
                    mine = [ev.trial_inputs(i) for i in ev.shared.mine()]
                with clock("warm_instruments"):  # while the judge makes its half
                    self._warm_instruments(mine[0] if mine else ev.trial_inputs(0))
                with clock("inputs_received"):
                    self.pristine = [ev.trial_inputs(i) for i in range(ev.req["trials"])]
                    if "candidate" in ev.req["timing"]["measure"]:
                        ev.timing_sets()  # made before any candidate code exists (mostly trials' inputs)
        except Outcome as o:
            self.fail(o.outcome, o.message, o.detail)
        clock.mark("set_up")
        self.send({"type": "hello", "pid": os.getpid(), "sandbox": confinement})
        from anvil import load_inline

        load_inline.set_builder(self.build_via_judge)
        self.policy = ev.req["defenses"]["policy"]
        self.recorder = policy.make_recorder(self.policy["allowed_ops"])
        self._wrap_recorder()
        before_maps = _maps()
        self.fingerprint = policy.Fingerprint()
        self.threads0 = policy.threads()
        try:
            with clock("import"):
                ev.import_candidate()
                self.check_after("importing model_new.py")
                ev.build_candidate()
                self.check_after("constructing ModelNew")
        except Outcome as o:
            self.fail(o.outcome, o.message, o.detail)
        self.send({"type": "loaded", "modules": sorted(_maps() - before_maps)})
        clock.mark("imported")
        with clock("verify"):
            self.verify()
        clock.mark("verified")
        with clock("timing"):
            self.time()
        clock.mark("done")
        self.send({"type": "done", "ops": self.recorder.forbidden, "clock": clock})

    def _warm_instruments(self, args):
        """Start what the harness's own work starts (torch's CPU thread pool, the profiler), so
        those threads exist before the thread list is taken, and load the kernels its checks use;
        `args`: one trial's inputs."""
        import warnings

        from anvil import compare
        from anvil.runner import _map_tensors, _tensor_pairs

        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        torch.ones(1 << 22).add_(1).sum()  # the intra-op pool
        copies = _map_tensors(args, lambda t: t.clone())
        for _name, a, b in _tensor_pairs(args, copies, "input"):
            if isinstance(a, torch.Tensor):
                compare.changed_elements(a, b)  # the input check's kernels, loaded here
        # One reference call: the libraries its ops use (cuBLAS, cuDNN handles and workspaces, which
        # the candidate's library calls share) start here, while the judge computes its own
        # reference, not inside the candidate's first call. Its output is zeroed before it is
        # freed: no correct answer waits in memory the candidate may be handed.
        try:
            with torch.no_grad():
                out = self.ev.ref(*copies)
            _map_tensors(out, lambda t: t.zero_())
            self.ev.sync()
            del out
        except Exception:  # noqa: BLE001 - a broken reference is the judge's to report
            pass
        del copies
        cuda = self.ev.device.type == "cuda"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])):
                if cuda:
                    torch.cuda._sleep(1)
                    torch.cuda.synchronize()
                else:
                    torch.ones(1).add_(1)

    def _wrap_recorder(self):
        """The recorder also poisons fresh allocations while self.poison is set."""
        side = self
        recorder = self.recorder
        original = type(recorder).__torch_dispatch__

        def dispatch(mode, func, types_, args=(), kwargs=None):
            out = original(mode, func, types_, args, kwargs)
            if side.poison and policy.bare(policy.op_name(func)) in POISONED_OPS and _type(out) is _Tensor:
                try:
                    out.untyped_storage().fill_(255)
                except Exception:  # noqa: BLE001 - a storage that cannot be filled stays as it is
                    pass
            return out

        type(recorder).__torch_dispatch__ = dispatch

    def build_via_judge(self, spec):
        """load_inline's build, done by the judge (this process cannot write the cache)."""
        self.send({"type": "build", "spec": spec})
        reply = channel.recv(self.sock)
        if reply.get("type") != "built":
            raise RuntimeError("anvil.load_inline: the judge did not build: %r" % reply)
        return reply["reply"]

    # -- the checks of this process ----------------------------------------------------------
    def check_after(self, where, out=None):
        clock = self.clock
        with clock("check_threads"):
            running = policy.threads()  # first: a short-lived launcher thread may be gone a moment later
        with clock("check_fingerprint"):
            changed = self.fingerprint.changed()
        if changed:
            self.hack("harness_patched", "%s replaced what judges it: %s" % (where, ", ".join(changed[:8])),
                      {"replaced": changed})
        with clock("check_children"):
            spawned = policy.children() if policy.has_children() else ()
        if spawned:
            self.hack("threads", "%s started %d process(es) (pid %s): candidate code may not start processes"
                      % (where, len(spawned), ", ".join(str(p) for p in sorted(spawned)[:5])),
                      {"processes": len(spawned)})
        extra = running - self.threads0
        if extra:
            self.hack("threads", "%s left %d thread(s) running: %s" % (where, len(extra),
                      ", ".join(policy.thread_names(extra)[:5])), {"threads": len(extra)})
        if out is not None:
            for name, leaf in _leaves(out, "output"):
                if isinstance(leaf, self.torch.Tensor) and _type(leaf) is not _Tensor:
                    self.hack("lazy_output", "%s returned %s as %s, a torch.Tensor subclass: outputs must be plain "
                              "tensors" % (where, name, _type(leaf).__name__))

    def call(self, args, where):
        """One candidate call under the recorder; returns its output (device synchronised)."""
        from anvil.runner import _raised, _trace

        torch = self.torch
        try:
            with torch.no_grad(), self.recorder:
                out = self.ev.new(*args)
        except BaseException as e:  # noqa: BLE001
            self.check_after(where)
            self.fail("runtime_error", "%s: %s" % (where, _raised(e, "the candidate")), _trace(e))
        self.check_after(where, out)
        try:
            self.ev.sync()
        except BaseException as e:  # noqa: BLE001
            self.fail("runtime_error", "%s: %s" % (where, _raised(e, "the candidate's kernels")), _trace(e))
        self.check_after(where, out)
        return out

    # -- verification -----------------------------------------------------------------------
    def verify(self):
        from anvil import compare
        from anvil.runner import _map_tensors, _tensor_pairs

        seed0 = self.ev.req["seed"] + 1
        for i, pristine in enumerate(self.pristine):
            for c in range(2):
                where = "trial %d (seed %d)%s" % (i, seed0 + i, ", second call" if c else "")
                args = _map_tensors(pristine, lambda t: t.clone())
                self.poison = True
                try:
                    with self.clock("verify_calls"):
                        out = self.call(args, where)
                finally:
                    self.poison = False
                with self.clock("verify_inputs"):
                    for name, before, after in _tensor_pairs(pristine, args, "input"):
                        if isinstance(after, self.torch.Tensor):
                            changed = compare.changed_elements(before, after)
                            if changed:
                                self.fail("wrong_answer", "%s: the candidate modified %s (%d of %d elements "
                                          "changed)" % (where, name, changed, before.numel()), reason="input_mutated")
                with self.clock("verify_send"):
                    reply = self.send_output({"type": "output", "trial": i, "call": c,
                                              "ops": self.recorder.forbidden}, out)
                if reply.get("type") != "received":
                    raise Stop()
                del out, args
        self.pristine = None

    # -- timing -----------------------------------------------------------------------------
    def time(self):
        t = self.ev.req["timing"]
        if "candidate" not in t["measure"]:
            return
        self.send({"type": "ready_to_time"})
        reply = channel.recv(self.sock)
        if reply.get("type") != "go":
            raise Stop()
        self.clock.mark("go")
        ev = self.ev
        trace = {}

        def fn(*args):
            with self.recorder:
                return ev.new(*args)

        clock = self.clock

        def observe(phase, k, out, sample_ms):
            with clock("timing_checks"):
                self.check_after("timed call %d" % k, out)
            with clock("timing_messages"):
                self.send({"type": "sample", "phase": phase, "k": k, "ms": sample_ms})
                reply = channel.recv(self.sock)
                if reply.get("type") == "check":
                    reply = self.send_output({"type": "timed_output", "k": k}, out)
            if reply.get("type") != "next":
                raise Stop()

        from anvil.runner import _raised, _trace

        ev.pin_flags()
        start = time.perf_counter()
        try:
            with self.torch.no_grad():
                result = timing.measure(fn, ev.call_inputs, ev.device, warmup=t["warmup"], calls=t["calls"],
                                        flush_l2=bool(t["flush_l2"]), kernel_sum=bool(t["kernel_sum"]),
                                        hide_launch=bool(t.get("hide_launch", True)), observe=observe, trace=trace)
        except Stop:
            raise
        except BaseException as e:  # noqa: BLE001
            self.fail("runtime_error", "while timing: %s" % _raised(e, "the candidate"), _trace(e))
        self.check_after("timing")
        result["seconds"] = time.perf_counter() - start
        clock.update(("trace_" + k, v) for k, v in (trace.pop("seconds", None) or {}).items())
        self.send({"type": "timing", "result": result, "trace": trace})


def _leaves(value, where, depth=0):
    if depth < 32 and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, "%s %d" % (where, i), depth + 1)
    elif depth < 32 and isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, "%s[%r]" % (where, k), depth + 1)
    else:
        yield where, value


def main(runner_evaluation, sock):
    """Entry of the forked candidate process; never returns."""
    import faulthandler

    faulthandler.enable(all_threads=True)  # a crash leaves its Python stack in the output tail
    code = 0
    try:
        CandidateSide(runner_evaluation, sock).run()
    except Stop:
        pass
    except channel.ChannelClosed:
        code = 3
    except BaseException as e:  # noqa: BLE001 - tell the judge what broke, if it still listens
        from anvil.runner import _trace, _what

        try:
            channel.send(sock, {"type": "fail", "outcome": "runtime_error",
                                "message": "the candidate's process failed: %s" % _what(e), "detail": _trace(e)})
        except BaseException:  # noqa: BLE001
            code = 3
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)
