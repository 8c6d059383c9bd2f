"""The candidate's process: the only place candidate code runs (docs/anti-hacking.md).

The judge forks a supervisor, which confines itself and forks this process into its own PID
namespace (anvil.confine); this process then serves the judge, answering one reply per command:

  (set-up, trusted: no candidate code exists yet) load the task, adopt the judge's plan of the
  inputs (channel.SharedInputs: split, make this side's half of the trials on the host; each,
  draw every trial once the device is up and take the judge's where they differ), set up the
  device once the judge's is, build
  the reference only to take its weights (and, when asked, to run the judge's batch for eager),
  warm the instruments; then  -> hello
  eager_batch  -> batch_done      the reference over the judge's pool (anvil.batch), before import
  load         -> loaded          import model_new.py (load_inline builds are asked of the judge),
                                  construct ModelNew, load the weights; the reference is gone first
  call         -> output          one verification call, under the op recorder, fresh allocations
                                  filled with NaN sentinels
  time         -> sample ... -> timing   the in-process timing (a claim: the judge bounds it)
  batch        -> [queued] batch_done   N calls over the judge's secret pool, back to back, no
                                  instruments; on a GPU `queued` (the calls enqueued behind the gate,
                                  the done flag's write after them, where the outputs lie) comes first
  A failure anywhere  -> fail | hack   (this process's own evidence against itself)

Nothing this process says is believed where it could help the candidate: outputs are compared by
the judge with its own reference, times are bounded by the judge's clock around the batch, and
the judge enforces the order and count of replies. The evidence gathered here (ops, threads,
replaced functions, the profiler's kernels) can only hurt the candidate; native code can suppress
it, which the judge's clock and comparisons make worthless for the reward.
"""
import time

from anvil import channel, policy, stress, timing
from anvil._cli import exit_after
from anvil.harness import (CannotServe, Outcome, candidate_failed, leaves, map_tensors, tensor_bytes, tensor_pairs,
                           trace, trial_digest)

POISONED_OPS = frozenset(["empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                          "empty_permuted"])
_type = type
_Tensor = None  # torch.Tensor, captured before any candidate code


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


class CandidateServer:
    def __init__(self, harness, sock):
        self.h = harness          # an anvil.harness.Harness of this process
        self.sock = sock
        self.recorder = None
        self.poison = False
        self.clock = timing.Clock()
        self.kept = []            # what the judge may still be reading through IPC
        self.pool = None          # the judge's pool (anvil.batch.Room), mapped once
        self.pristine = None      # the trials' inputs (set-up), until blind() or the last verification call
        self.sets = None          # blind: the verification's sets in the judge's order (blind)
        self.set_calls = 0

    # -- messages ---------------------------------------------------------------------------
    def send(self, message, value=None, ipc=False):
        return channel.send(self.sock, message, value, ipc=ipc)

    def recv(self):
        return channel.recv(self.sock, self.h.device if self.h.device is not None else None)

    def fail(self, outcome, message, detail="", reason=None):
        self.send({"type": "fail", "outcome": outcome, "message": message, "detail": detail, "reason": reason})
        if reason == "gpu_memory":  # the judge measures what this process holds (judge.memory_short):
            self.wait_for_the_end()  # kept as it is until the judge ends it
        raise Stop()

    def wait_for_the_end(self):
        """Idle until the judge closes the channel or ends this process."""
        while True:
            try:
                if not self.sock.recv(65536):
                    return
            except OSError:
                return

    def failed(self, doing, e, who="the candidate"):
        """Ends with the candidate's own failure `e` while `doing` (candidate_failed)."""
        o = candidate_failed(doing, e, self.torch, who)
        self.fail(o.outcome, o.message, o.detail, o.reason)

    def hack(self, reason, message, evidence=None):
        self.send({"type": "hack", "reason": reason, "message": message, "evidence": evidence or {}})
        raise Stop()

    # -- set-up (trusted) --------------------------------------------------------------------
    def set_up(self, confinement):
        global _Tensor
        h, clock = self.h, self.clock
        clock.mark("started")
        try:
            with clock("setup"):
                import torch
                import torch._dynamo  # noqa: F401 - it re-wraps torch functions on import: before the fingerprint

                _Tensor = torch.Tensor
                self.torch = h.torch = torch
                h.load_task()
                h.adopt_plan(h.shared.wait_plan())  # the judge's (lean: nothing drawn ahead)
                with clock("host_inputs"):  # split: this side's half, made and sent while the judge starts CUDA
                    if not h.lean and not h.draws_each:
                        h.shared.make_mine(h)
                locked = h.req.get("gpu_lock") is not None  # the judge holds the GPU from device_ready on:
                if locked:  # the host's part of the reference first
                    h.construct_reference()
                with clock("device_wait"):
                    h.shared.wait_device_ready()
                with clock("device"):
                    h.setup()
                    if getattr(h, "done_page", None) is not None:  # the batches' done word (anvil.batch.DonePage)
                        self.done_ptr = h.done_page.register()
                if locked:
                    h.place_reference()
                else:
                    h.build_reference()  # for its weights (the judge keeps its own reference)
                self.weights = {k: v.detach() for k, v in h.ref.state_dict().items()}
                with clock("inputs"):
                    if h.draws_each:  # every set, in order; the judge compares their digests with its own
                        mine = [h.trial_inputs(i) for i in range(h.drawn_sets())]
                        h.shared.send_digests([trial_digest(a) for a in mine])
                    else:
                        mine = [] if h.lean else [h.trial_inputs(i) for i in h.shared.mine()]
                with clock("warm_instruments"):  # while the judge makes its half (split) or compares
                    self._warm_instruments(mine[0] if mine else h.trial_inputs(0), clone=not h.lean)
                del mine  # a set drawn otherwise here goes when the judge's replaces it
                if h.draws_each:
                    with clock("drawn_again"):  # a set drawn otherwise here: the judge's copy instead
                        try:
                            h.kept_inputs.update(h.shared.take_replacements(h.device))
                        except BaseException as e:  # noqa: BLE001 - out of memory is anvil's limit
                            h.out_of_memory(e, "taking the judge's inputs")
                            raise
                with clock("inputs_received"):
                    if h.lean:  # each call draws its own
                        self.pristine = None
                        h.free_cached()
                    else:
                        self.pristine = [h.trial_inputs(i) for i in range(h.req["trials"])]
                        if "candidate" in h.req["timing"]["measure"]:
                            h.timing_sets()
                if locked:  # the baselines alone: idle until eager's batch, maybe beside a wave's others
                    h.free_cached()
        except Outcome as o:
            self.fail(o.outcome, o.message, o.detail)
        except CannotServe as e:  # anvil's limit (the GPU too small for its plan): no candidate code exists yet
            self.send({"type": "cannot_serve", "message": str(e)})
            raise Stop()
        try:  # the host memory this process may take from here on, for good (no candidate code exists yet)
            from anvil import confine

            confinement = dict(confinement, memory=confine.limit_data(self.host_allowance()))
        except Exception as e:  # noqa: BLE001 - never run candidate code without its limit
            self.send({"type": "cannot_serve", "message": "its host memory could not be limited: %s" % e})
            raise Stop()
        clock.mark("set_up")
        self.send({"type": "hello", "sandbox": confinement})

    def _warm_instruments(self, args, clone=True):
        """Start what the harness's own work starts (torch's CPU thread pool, the profiler), so
        those threads exist before the thread list is taken, and load the kernels its checks use;
        one reference call warms the libraries the reference uses (cuBLAS, cuDNN handles), which
        the candidate's library calls share, on clones of `args` (clone=False: on `args`, a draw
        nothing else uses). Its output is zeroed before it is freed."""
        import warnings

        from torch.profiler import ProfilerActivity, profile

        from anvil import output_compare

        torch = self.torch
        torch.ones(1 << 22).add_(1).sum()  # the intra-op pool
        for _name, a, _b in tensor_pairs(args, args, "input"):  # the input check's kernels, on a slice
            if isinstance(a, torch.Tensor):
                head = a.reshape(-1)[:4096]
                output_compare.changed_elements(head, head.clone())
        copies = map_tensors(args, lambda t: t.clone()) if clone else args
        del args
        try:
            with torch.no_grad():
                out = self.h.ref(*copies)
            self.output_bytes = tensor_bytes(out)  # what a call returns (the host memory a CPU batch keeps)
            map_tensors(out, lambda t: t.zero_())
            self.h.sync()
            del out
        except Exception:  # noqa: BLE001 - a broken reference is the judge's to report
            pass
        del copies
        cuda = self.h.device.type == "cuda"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])):
                if cuda:
                    torch.cuda._sleep(1)
                    torch.cuda.synchronize()
                else:
                    torch.ones(1).add_(1)

    # -- the commands -----------------------------------------------------------------------
    def serve(self):
        handlers = {"eager_batch": self.eager_batch, "load": self.load, "call": self.call,
                    "time": self.time, "batch": self.batch}
        while True:
            msg = self.recv()
            kind = msg.get("type")
            self.release(keep_cache=kind in ("batch", "eager_batch"))
            if kind == "end":
                return
            handler = handlers.get(kind)
            if handler is None:
                raise Stop()
            self.clock.mark(str(kind))
            handler(msg)

    def release(self, keep_cache=False):
        """What the judge has read by now (it sends its next command only after reading); the
        memory goes back to the device unless a batch comes next: a batch's outputs, of the sizes
        the last one had, then take those blocks of torch's cache again, so its calls make no
        cudaMalloc and no new CUDA IPC handle."""
        had = bool(self.kept)
        self.kept = []
        if had and not keep_cache and self.h.device is not None and self.h.device.type == "cuda":
            self.torch.cuda.empty_cache()  # the judge's next allocations live in another process

    def eager_batch(self, msg):
        if getattr(self.h, "ref", None) is None:
            raise Stop()  # after the candidate's import the reference is gone: out of order
        self.run_batch(msg, self.h.ref)

    def load(self, msg):
        from anvil import load_inline

        h, clock = self.h, self.clock
        del h.ref  # no reference in the process that runs candidate code
        sets = msg.get("sets")
        msg.clear()  # serve()'s frame holds it while the candidate's code is imported: nothing of it stays
        if sets is not None:
            with clock("blind_sets"):
                self.blind(sets)
        load_inline.set_builder(self.build_via_judge)
        if h.req["candidate_kind"] == "file":
            load_inline.install()  # before the fingerprint: routing load_inline is the harness's own doing
        self.policy = h.req["defenses"]["policy"]
        self.recorder = policy.make_recorder(self.policy["allowed_ops"])
        self._wrap_recorder()
        before_maps = _maps()
        self.fingerprint = policy.Fingerprint()
        self.threads0 = policy.threads()
        # The stream every call is made on: a call that leaves another current moves the harness's own
        # work there (the batch's done flag, the closing marker), past the work it left behind.
        self.stream0 = self.torch.cuda.current_stream() if h.device.type == "cuda" else None
        try:
            with clock("import"):
                h.import_candidate()
                self.check_after("importing model_new.py")
                h.build_candidate(self.weights)
                self.check_after("constructing ModelNew")
        except Outcome as o:
            self.fail(o.outcome, o.message, o.detail)
        del self.weights
        clock.mark("imported")
        self.send({"type": "loaded", "modules": sorted(_maps() - before_maps), "weights": h.weights_note})

    def blind(self, sets):
        """The verification's sets as the judge ordered them (Judge.blind_sets), made before any
        candidate code exists: a trial's (`{"trial": i}`: its inputs, drawn at set-up) or a stress
        set's (`{"stress": spec}`: drawn now, stress_inputs). Then only the list stays: the plan, the
        stress sets' names and seeds, the trials' seed base (Harness.forget_seeds) and the trials
        kept by number beyond timing's base sets are gone, so which set is which can be told here
        from their values alone, never from the call that asks for one (timing's base sets, the
        first trials, can be found among them by their values: docs/anti-hacking.md, Known limits)."""
        if not isinstance(sets, list) or self.pristine is None or self.h.lean:
            raise Stop()
        made = []
        for slot, entry in enumerate(sets):
            if not isinstance(entry, dict):
                raise Stop()
            trial = entry.get("trial")
            if isinstance(trial, int) and not isinstance(trial, bool) and 0 <= trial < len(self.pristine):
                made.append(self.pristine[trial])
            elif isinstance(entry.get("stress"), dict):
                made.append(self.stress_inputs(entry["stress"], slot=slot))
            else:
                raise Stop()
            entry.clear()
        sets.clear()
        self.sets, self.set_calls, self.pristine = made, 0, None
        self.h.forget_trials()  # kept by trial number, they would name each trial's place: timing's base sets only
        self.h.forget_seeds()

    def host_allowance(self):
        """The private host memory the candidate may take beyond what set-up took (share/sandbox.json's
        candidate_host_bytes), and twice the task's own weights (Model's state_dict): ModelNew is
        built on the host first, as KernelBench's harness builds it (a Linear(32768, 32768) is 4 GiB
        there before it moves to the GPU); on the CPU also what its calls' outputs and inputs take
        there: a batch's outputs (at most batch.MAX_CALLS) and the sets of inputs it is sent."""
        from anvil import batch, confine

        extra = int(confine.settings().get("candidate_host_bytes") or 0)
        extra += 2 * tensor_bytes(list((getattr(self, "weights", None) or {}).values()))
        if self.h.device.type != "cuda":
            extra += (batch.MAX_CALLS + 8) * getattr(self, "output_bytes", 0) + 8 * (self.h.input_bytes or 0)
        return extra

    def build_via_judge(self, spec):
        """load_inline's build, done by the judge (this process cannot write the cache)."""
        self.send({"type": "build", "spec": spec})
        reply = channel.recv(self.sock)
        if reply.get("type") != "built":
            raise RuntimeError("anvil.load_inline: the judge did not build: %r" % reply.get("type"))
        return reply["reply"]

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

    # -- evidence of this process ------------------------------------------------------------
    def check_stream(self, where):
        """side_stream when candidate code left another stream current than the one it was called on."""
        stream0 = getattr(self, "stream0", None)
        if stream0 is not None:
            now = self.torch.cuda.current_stream()
            if now != stream0:
                self.hack("side_stream", "%s left another stream current (0x%x, called on 0x%x): forward must "
                          "return with the stream it was called on current" % (where, now.cuda_stream, stream0.cuda_stream))

    def check_after(self, where, out=None):
        self.check_stream(where)
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
        for _ in range(20):  # a thread the call joined may linger a moment in /proc: only one that stays counts
            if not extra:
                break
            time.sleep(0.005)
            extra &= policy.threads()
        if extra:
            self.hack("threads", "%s left %d thread(s) running: %s" % (where, len(extra),
                      ", ".join(policy.thread_names(extra)[:5])), {"threads": len(extra)})
        if out is not None:
            for name, leaf in leaves(out, "output"):
                if isinstance(leaf, self.torch.Tensor) and _type(leaf) is not _Tensor:
                    self.hack("lazy_output", "%s returned %s as %s, a torch.Tensor subclass: outputs must be plain "
                              "tensors" % (where, name, _type(leaf).__name__))

    def run_candidate(self, args, where):
        """One candidate call under the recorder; returns its output (device synchronised)."""
        torch = self.torch
        started = policy.last_pid()
        try:
            with torch.no_grad(), self.recorder:
                out = self.h.new(*args)
        except BaseException as e:  # noqa: BLE001
            self.check_after(where)
            self.failed(where, e)
        self.check_after(where, out)
        try:
            self.h.sync()
        except BaseException as e:  # noqa: BLE001
            self.failed(where, e, "the candidate's kernels")
        self.check_after(where, out)
        self.check_no_thread_started(where, started)
        return out

    def check_no_thread_started(self, where, started):
        """On a GPU, a call that started a thread or a process, even one it joined before it returned
        (which check_after's list of threads no longer shows), is `threads`: kernels are launched
        from the calling thread (policy.last_pid). The candidate's first call is let be: a library's lazy
        start-up may take a thread of its own there, and nothing of that call is timed."""
        self.calls_made = getattr(self, "calls_made", 0) + 1
        if started is None or self.calls_made == 1 or self.h.device.type != "cuda":
            return  # on the CPU a kernel's own threads are its work (a parallel_for); no launch to speak of
        now = policy.last_pid()
        if now is not None and now != started:
            self.hack("threads", "%s started %d thread(s) or process(es) while it ran (joined or not): candidate "
                      "code may launch work only from the calling thread" % (where, (now - started) % (1 << 22)),
                      {"started": (now - started) % (1 << 22)})

    # -- verification ------------------------------------------------------------------------
    def call(self, msg):
        from anvil import output_compare

        i, c = int(msg["trial"]), int(msg["call"])
        h = self.h
        spec = msg.get("stress")
        if self.sets is not None:  # blind: set i of those drawn at load, a trial's or a stress set, unknown here
            if spec is not None or not 0 <= i < len(self.sets):
                raise Stop()
        elif not (0 <= i < h.req["trials"] or (spec is not None and i >= h.req["trials"])):
            raise Stop()
        known = {}  # the stress draw's digests by id(), read again as the lean call's "before"
        if spec is not None:  # inputs the task does not make (anvil.stress): drawn here as the judge drew them
            with self.clock("stress_draws"):
                made = self.stress_inputs(spec, known)
        if h.lean:  # the call's inputs drawn for it; no copy: their digests before and after the call
            pristine, h_forget = None, False
            args = made if spec is not None else h.trial_inputs(i)
            digests = [(name, known[id(t)] if id(t) in known else output_compare.digest(t))
                       for name, t, _ in tensor_pairs(args, args, "input") if isinstance(t, self.torch.Tensor)]
        elif spec is not None:
            pristine, h_forget = made, False
            args = map_tensors(pristine, lambda t: t.clone())
        elif self.sets is not None:
            pristine = self.sets[i]
            self.set_calls += 1
            h_forget = self.set_calls >= 2 * len(self.sets)  # every set called twice: timing needs its base sets only
            if h_forget:
                self.sets = [None] * len(self.sets)
            args = map_tensors(pristine, lambda t: t.clone())
        else:
            pristine = self.pristine[i]
            h_forget = i == len(self.pristine) - 1 and c == 1  # the last verification call: timing needs its base sets only
            if h_forget:
                self.pristine = [None] * len(self.pristine)
            args = map_tensors(pristine, lambda t: t.clone())
        where = ("stress trial %s" % spec.get("name") if spec is not None else
                 "verification call on set %d%s" % (i, ", second call" if c else "") if self.sets is not None else
                 "trial %d (seed %d)%s" % (i, h.trial_seed(i), ", second call" if c else ""))
        self.poison = True
        try:
            with self.clock("verify_calls"):
                out = self.run_candidate(args, where)
        finally:
            self.poison = False
        with self.clock("verify_inputs"):
            if h.lean:
                now = dict((name, output_compare.digest(t)) for name, t, _ in tensor_pairs(args, args, "input")
                           if isinstance(t, self.torch.Tensor))
                for name, before in digests:
                    if now.get(name) != before:
                        self.fail("wrong_answer", "%s: the candidate modified %s (its contents differ after the call)"
                                  % (where, name), reason="input_mutated")
                del args
                h.free_cached()  # for the judge's reference of the next trial
            for name, before, after in tensor_pairs(pristine, args, "input") if not h.lean else ():
                if isinstance(after, self.torch.Tensor):
                    changed = output_compare.changed_elements(before, after)
                    if changed:
                        self.fail("wrong_answer", "%s: the candidate modified %s (%d of %d elements changed)"
                                  % (where, name, changed, before.numel()), reason="input_mutated")
        with self.clock("verify_send"):
            self.kept = self.send({"type": "output", "trial": i, "call": c, "ops": self.recorder.forbidden}, out,
                                  ipc=self.h.device.type == "cuda")
            self.kept.append(out)
        if h_forget:
            del pristine, args
            self.h.forget_trials()

    def stress_inputs(self, spec, known=None, slot=None):
        """A stress trial's inputs (anvil.stress), drawn here with the judge's secret seed, as it drew
        them (no copy crosses): their digest must be the judge's (`spec["digest"]`); where it is not
        (a get_inputs() with state its seed does not reset), this process says so and takes the
        judge's own, sent as bytes. `known`, where given, gets the draw's digests by id() (emptied for
        the judge's)."""
        known = {} if known is None else known
        made = stress.draw(self.h, str(spec["name"]), int(spec["seed"]))[0]
        if trial_digest(made, memo=known) == spec.get("digest"):
            return made
        known.clear()
        del made
        self.h.free_cached()
        self.send({"type": "stress_draws_differ"} if slot is None else {"type": "stress_draws_differ", "slot": slot})
        reply = channel.recv(self.sock, self.h.device)
        if reply.get("type") != "stress_inputs" or not isinstance(reply.get("value"), list):
            raise Stop()
        return reply["value"]

    # -- the in-process timing (a claim) -----------------------------------------------------
    def time(self, msg):
        t = self.h.req["timing"]
        h, clock = self.h, self.clock
        trace_ = {}

        started = [None]

        def fn(*args):
            started[0] = policy.last_pid()
            with self.recorder:
                return h.new(*args)

        def observe(phase, k, out, sample_ms):
            with clock("timing_checks"):
                self.check_after("timed call %d" % k, out)
                if phase != "inspected":  # the profiler's own threads may start while it records
                    self.check_no_thread_started("timed call %d" % k, started[0])
            with clock("timing_messages"):  # a timed or inspected call's output goes with its sample, always
                sample = {"type": "sample", "phase": phase, "k": k, "ms": sample_ms}
                if phase in ("timed", "inspected"):
                    kept = self.send(sample, out, ipc=h.device.type == "cuda")
                else:
                    kept = self.send(sample)
                reply = channel.recv(self.sock)
                del kept  # the judge has read what it wanted of the output
            if reply.get("type") != "next":
                raise Stop()

        h.pin_flags()
        start = time.perf_counter()
        try:
            with self.torch.no_grad():
                result = timing.measure(fn, h.call_inputs, h.device, warmup=t["warmup"], calls=t["calls"],
                                        flush_l2=bool(t["flush_l2"]), kernel_sum=bool(t["kernel_sum"]),
                                        hide_launch=bool(t.get("hide_launch", True)), observe=observe, trace=trace_)
        except Stop:
            raise
        except BaseException as e:  # noqa: BLE001
            self.failed("while timing", e)
        self.check_after("timing")
        if h.lean:
            h.forget_trials(0)  # the base set: the judge's batch comes next
        result["seconds"] = time.perf_counter() - start
        clock.update(("trace_" + k, v) for k, v in (trace_.pop("seconds", None) or {}).items())
        self.send({"type": "timing", "result": result, "trace": trace_, "ops": self.recorder.forbidden,
                   "clock": clock})

    # -- the judge's batch -------------------------------------------------------------------
    def batch(self, msg):
        if getattr(self.h, "new", None) is None:
            raise Stop()
        self.run_batch(msg, self.h.new)

    def run_batch(self, msg, model):
        """The judge's batch (anvil.batch): its calls back to back, every output kept and handed
        back, no instruments. On a GPU over the judge's pool (mapped once): the stream waits for the
        gate, the calls are enqueued (each call's views made, its outputs described, between
        launches), then the done flag's write; `queued` says where the outputs lie, and the judge's
        clock ends on its own stream once it has read them. On the CPU the arguments came in a
        sealed memfd and the outputs go back in one, around the judge's wall clock."""
        from anvil import batch

        h = self.h
        cuda = h.device.type == "cuda"
        outs, described = [], []
        dense = {"segs": [], "offs": []}
        marks = [time.perf_counter()]
        try:
            h.pin_flags()
            with self.torch.no_grad():
                if cuda:
                    self.exporter = getattr(self, "exporter", None) or batch.Exporter()  # allocations seen before
                    exporter = self.exporter
                    if self.pool is None or self.pool.handle != msg["handle"]:  # the judge's pool grew
                        if self.pool is not None:
                            self.pool.close()
                        self.pool = _MappedPool(msg["handle"], int(msg["nbytes"]))
                    gate = msg["gate"]
                    self.flags = getattr(self, "flags", None) or batch.Mapped()  # mapped once
                    words = self.flags.base(str(gate["handle"]))[0]
                    batch.wait_for_gate(words, gate["value"])
                    marks.append(time.perf_counter())
                    for skeleton in msg["layout"]:
                        out = model(*batch.rebuild(skeleton, self.pool.region))
                        outs.append(out)
                        described.append(exporter.note(out, dense if not described or described[-1] is None
                                                       else None))
                    self.check_stream("in the judge's batch, a call")  # the done flag goes on the calls' stream
                    batch.raise_done(self.done_ptr, gate["value"])
                    if all(d is None for d in described):
                        answer = {"dense": dense}
                    else:  # not every output one tensor alike: each described (those noted densely again)
                        answer = {"outputs": [exporter.describe(o) for o in outs]}
                    self.send(dict(answer, type="queued", calls=len(outs), segments=exporter.segments))
                else:
                    marks.append(time.perf_counter())
                    for args in msg["value"]:
                        outs.append(model(*args))
            marks.append(time.perf_counter())
            h.sync()
            marks.append(time.perf_counter())
        except Stop:
            raise
        except BaseException as e:  # noqa: BLE001
            self.failed("in the judge's batch", e)
        phases = {name: round((b - a) * 1e3, 4) for name, a, b in zip(("map_ms", "loop_ms", "sync_ms"), marks, marks[1:])}
        if cuda:
            self.send({"type": "batch_done", "calls": len(outs), "phases": phases})
            self.kept = [outs]
        else:
            self.kept = self.send({"type": "batch_done", "calls": len(outs), "phases": phases}, outs)
            self.kept.append(outs)


class _MappedPool:
    """The judge's pool in this process (CUDA IPC), mapped once per evaluation."""

    def __init__(self, handle, nbytes):
        from anvil import batch

        self.handle = handle
        self.mapped = batch.Mapped()
        self.base = batch.device_view(self.mapped.base(handle)[0], nbytes)

    def region(self, region):
        from anvil import batch

        return batch.region_tensor(self.base, region)

    def close(self):
        self.base = None
        self.mapped.close()


def main(harness, sock, confinement):
    """Entry of the candidate's process (forked, confined); never returns."""
    import faulthandler

    faulthandler.enable(all_threads=True)  # a crash leaves its Python stack in the output tail
    exit_after(lambda: _serve(harness, sock, confinement))


def _serve(harness, sock, confinement):
    """The candidate's process's work; its exit status."""
    code = 0
    server = CandidateServer(harness, sock)
    try:
        server.set_up(confinement)
        server.serve()
    except Stop:
        pass
    except channel.ChannelClosed:
        code = 3
    except BaseException as e:  # noqa: BLE001 - tell the judge what broke, if it still listens
        from anvil.harness import what

        # The GPU ran out during anvil's own work here (drawing inputs: harness.memory_fault): the
        # judge measures whose memory it was (judge.memory_short), this process kept as it is.
        memory = getattr(e, "memory_limited", False) is True
        try:
            channel.send(sock, {"type": "fail", "outcome": "runtime_error", "reason": "gpu_memory" if memory else None,
                                "message": "the candidate's process failed: %s" % what(e), "detail": trace(e)})
            if memory:
                server.wait_for_the_end()
        except BaseException:  # noqa: BLE001
            code = 3
    return code
