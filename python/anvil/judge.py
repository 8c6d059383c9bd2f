"""The judge: the evaluation with the defenses on (docs/anti-hacking.md).

The runner process becomes the judge. Before it touches CUDA it forks the candidate's process
(anvil.confine, anvil.candidate), the only one that ever runs candidate code, and makes itself
non-dumpable. The judge drives and the candidate's process answers, one reply per command, in an
order the judge enforces (a missing, extra or out-of-order reply: hack_suspected / protocol):

  hello -> [eager_batch] -> load -> call x (2 per trial) -> time -> batch -> end

or, for the baselines alone (candidate_kind "none": anvil baselines), hello -> [eager_batch] -> end.

The judge never runs candidate code and believes nothing of the candidate's process that could
help it: it computes every expected output itself (on its own copies of the inputs), reads the
outputs it checks from memory itself, and times the candidate with its own clock around a batch of
calls on inputs drawn in secret (anvil.batch); the candidate's in-process timing is a claim that
anvil bounds by that clock. Decided here:

  wrong_answer     an output differs from the judge's reference (reason "mismatch"), holds the
                   NaN sentinel bytes where the reference is finite ("unwritten_output"), or the
                   candidate modified an input ("input_mutated");
  hack_suspected   with the first of REASONS found (all are listed).

Timing of eager and torch.compile happens here, after the candidate's process has ended, with the
same per-call inputs and method as the candidate's claim; eager's batch runs in the candidate's
process before its code is imported, so that both batches go through the same protocol.
"""
import base64
import math
import os
import random
import select
import signal
import sys
import time

from anvil import batch, channel, confine, evidence, output_compare, policy, share, stress, timing
from anvil._cli import one_line
from anvil.harness import (DETAIL_LINES, SEEDED_HINT, Harness, Outcome, RequestError, leaves, map_tensors,
                           memory_error, raised, tail, tensor_bytes, trace, trial_digest)
from anvil.harness import what as what_of

REASONS = ("protocol", "harness_patched", "lazy_output", "threads", "torch_fallback", "side_stream",
           "timing_escape", "no_kernels", "foreign_work", "timed_output_mismatch", "precision", "below_roofline")
# Checks drawn in secret per evaluation (share/protocol.json's "checks"): every output the candidate's
# process hands over is handed over whether or not it is checked, so nothing it sees tells the two apart.
CHECK_SHARE = share.checks()["timed_full_share"]  # of the in-process timing's calls, compared in full
PRECISION_CALLS = share.checks()["precision_calls"]  # verification calls checked against float64
# Expected outputs kept on the judge's device from the task's probe (probe_task) up to this many bytes;
# beyond it a trial's reference is run again when it is needed.
KEEP_EXPECTED_BYTES = 4 << 30
# A stress trial's answers (its output and, by the float64 rule, the float64 run's) are kept on the GPU
# from the task's probe to the verification up to this size; a task whose outputs are larger has none.
KEEP_STRESS_BYTES = 1 << 30
# Float64 runs deferred until the candidate's process is gone wait on the host (precision_run): beyond
# this many bytes of them, only the verification's are (a lean task's outputs of gigabytes).
DEFER_HOST_BYTES = 16 << 30
OUTCOMES_AFTER_IMPORT = ("runtime_error", "load_error", "wrong_answer")  # what the candidate may say of itself
# The reasons a candidate's own failure keeps (its word, but one that only labels a -1)
CANDIDATE_REASONS = (("runtime_error", "gpu_memory"),)
WRONG_REASONS = ("mismatch", "unwritten_output", "input_mutated")

# A lean measurement of baselines prepared in a wave reserves WAVE_SETS sets and WAVE_SLACK, the lean
# ones of a wave within WAVE_SHARE of the GPU's memory (Judge.wave_room).
WAVE_SETS = 4
WAVE_SLACK = 1 << 30
WAVE_SHARE = 0.6
# The judge's CUDA context and libraries' handles, taken off what others hold on the GPU (Judge.memory_short)
JUDGE_CONTEXT_BYTES = 1 << 30
# Memory torch's allocator keeps cached in the judge, beyond what it holds, past which the judge hands it
# back before each command to the candidate's process (Judge.ask): a float64 run of a large task's
# reference leaves tens of GiB cached, which the candidate's process then needs to draw its inputs.
IDLE_CACHE_BYTES = 1 << 30


STRESS_TEXT = {"signed": "signs flipped at random", "scaled_up": "scaled by 1e3", "scaled_down": "scaled by 1e-3",
               "heavy": "heavy-tailed values", "spikes": "a few elements 1e3 times the largest"}


class Hack(Exception):
    def __init__(self, reason, message, evidence_=None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.evidence = evidence_ or {}


class Judge(Harness):
    """One defended evaluation (see the module docstring)."""

    def __init__(self, request, report):
        super().__init__(request, report["env"])
        self.report = report
        self.defenses = request["defenses"]
        self.report["defenses"] = {"enabled": True}
        self.supervisor = None    # the confined candidate's supervisor (the judge's child)
        self.cand_pid = None      # the candidate's process (the supervisor's child)
        self.candidate_gone = None  # every process of its namespace reaped before the baselines (end_candidate)
        self.imported = False
        self.expected = {}        # trial -> the reference's output (kept since probe_task, expected_for)
        self.current = None       # (trial, output) of a reference not kept (expected_for)
        self.signature = None     # trial 0's reference output, for the batch's sampled positions
        self.ref_ms = None        # one reference call, timed in passing (sizes eager's batch)
        self.trace = None
        self.done_ops = {}
        self.own_names = None
        self.timed_checked = 0    # the claim's calls sampled (every timed and inspected one)
        self.timed_full = 0       # ... and compared in full
        self.precision = None     # the worst precision check (findings.precision decides on it)
        self.precision_checks = []  # every precision check made: where, and what it found
        self.precision_later = []  # float64 runs deferred until the candidate's process is gone (precision_run)
        self.precision_at = set()  # the verification calls (trial, call) checked against float64, drawn in secret
        self.stress_plan = []     # this evaluation's stress trials (plan_stress), made before the candidate's import
        self.slots = None         # blind_sets: the verification's sets in the order the candidate's process holds them
        self.out64 = {}           # trial -> a float64 run of the reference on its inputs (precision checks)
        # What the judge measured of memory (context_bytes, output_bytes, reference_work_bytes,
        # batch_calls) for memory_allowance; the candidate's part in a memory fault (memory_fault).
        self.memory = {"context_bytes": 0, "output_bytes": 0, "reference_work_bytes": 0, "batch_calls": 0}
        self.roofline = None
        self.device_peaks = None  # the GPU's peaks, measured before the candidate's import (measure_peaks)
        self.mapped = None
        self.room = None          # the batches' pool (batch.Room), one per evaluation
        self.timed_expected = None  # lean: trial 0's reference output, the answer for every timed call of the claim
        self.gpu_lock = None  # timing.GpuLock, where the request names one
        self.compiled_ref = None  # torch.compile(ref) made and called once by prepare_together (or what it raised)
        self.clock = timing.Clock()
        if timing.Clock.origin is not None:  # the marks' origin itself (CLOCK_MONOTONIC: comparable across processes)
            self.clock["origin"] = round(timing.Clock.origin, 4)
        self.report["defenses"]["seconds"] = {"judge": self.clock, "candidate": {}}

    # -- the candidate's process ------------------------------------------------------------
    def visible_paths(self):
        """What the candidate's process sees besides the system directories: the candidate, the
        task, the judge's build output for load_inline, anvil's Python package, Python and torch,
        and anvil's runtime libraries (never the rest of the cache)."""
        paths = [self.req["candidate_dir"], self.req["task_file"], self.inline_dir(),
                 os.path.dirname(os.path.dirname(os.path.abspath(__file__))), sys.prefix, sys.base_prefix]
        paths += [p for p in sys.path if p and os.path.isabs(p)]
        cache = os.environ.get("ANVIL_CACHE")
        if cache:
            paths.append(os.path.join(cache, "runtime"))
        return paths

    def inline_dir(self):
        return os.path.join(os.path.dirname(os.path.abspath(self.req["candidate_dir"])), "inline")

    def fork_candidate(self):
        import torch  # noqa: F401 - imported before the fork (CUDA is not touched)

        from anvil import _cli, candidate

        os.makedirs(self.inline_dir(), mode=0o755, exist_ok=True)
        judge_end, cand_end = channel.pair()
        judge_inputs, cand_inputs = channel.pair()
        self.done_page = batch.DonePage() if self.req["device"].startswith("cuda") else None  # shared by the fork
        pid = os.fork()
        if pid == 0:
            judge_end.close()
            judge_inputs.close()
            for fd in _cli.report_descriptors():
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                program = self.req.get("syscall_filter")
                state = confine.enter(self.visible_paths(), gpu=self.req["device"].startswith("cuda"),
                                      syscall_filter=base64.b64decode(program) if program else None)
                confine.clean_environment()
            except BaseException as e:  # noqa: BLE001 - never run the candidate unconfined
                try:
                    channel.send(cand_end, {"type": "confinement_failed", "message": str(e)})
                finally:
                    os._exit(4)
            h = Harness(self.req)
            h.shared = channel.SharedInputs(cand_inputs, 1, self.req["trials"])
            h.done_page = self.done_page
            candidate.main(h, cand_end, state)  # never returns
        cand_end.close()
        cand_inputs.close()
        self.shared = channel.SharedInputs(judge_inputs, 0, self.req["trials"])
        self.sock = judge_end
        self.supervisor = pid
        err = confine.non_dumpable() or confine.subreaper()
        self.report["defenses"]["judge"] = "non-dumpable, reaper of the candidate's processes" if err is None else err

    def candidate_pid(self):
        """The candidate's process: the supervisor's grandchild (below the new namespace's PID 1),
        found once, at its hello, before any candidate code could start others."""
        if self.cand_pid is None and self.supervisor is not None:
            inits = policy.children(self.supervisor)
            workers = policy.children(next(iter(inits))) if len(inits) == 1 else set()
            if len(workers) == 1:
                self.cand_pid = workers.pop()
        return self.cand_pid

    @staticmethod
    def _kill(pid, sig=signal.SIGKILL):
        if pid:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def kill_leftovers(self, reap=True):
        """SIGKILL (and, with `reap`, wait for) every process below the judge but the supervisor and
        the candidate's process (processes the candidate started, orphans the judge reaped);
        returns how many."""
        mine = {self.supervisor, self.cand_pid} | (policy.children(self.supervisor) if self.supervisor else set())
        left = [p for p in policy.descendants() if p not in mine]
        for p in left:
            self._kill(p)
        for p in left if reap else ():
            try:
                os.waitpid(p, 0)
            except ChildProcessError:
                pass
        return len(left)

    def end_candidate(self, wait=True, settle=False, limit_s=5.0):
        """SIGKILL the candidate's process (its PID namespace dies with it) and its supervisor; wait
        for the supervisor (whose exit follows the candidate's) when `wait`. With `settle`, reap
        everything left below the judge too (the namespace's init, handed to the judge, its
        reaper: reaped only once every process of its namespace has exited), up to limit_s: a
        killed process frees its memory (and its CUDA context) before it can be reaped, and a
        baseline timed next must not share the CPU with that. Sets candidate_gone (False: some
        were still there after limit_s; the baselines are then not kept)."""
        self._kill(self.candidate_pid())
        self._kill(self.supervisor)
        if not wait:
            return
        if self.supervisor is not None:
            try:
                os.waitpid(self.supervisor, 0)
            except ChildProcessError:
                pass
            self.supervisor = None
        if not settle:
            return
        deadline = time.perf_counter() + limit_s
        self.candidate_gone = False
        while time.perf_counter() < deadline:
            left = policy.descendants()
            if not left:
                self.candidate_gone = True
                return
            for p in left:
                self._kill(p)
                try:
                    os.waitpid(p, os.WNOHANG)
                except ChildProcessError:
                    pass
            time.sleep(0.002)

    def died(self):
        status = ""
        if self.supervisor is not None:
            try:
                _, st = os.waitpid(self.supervisor, 0)
                code = os.waitstatus_to_exitcode(st)
                status = ("was killed by signal %d" % (code - 128) if code > 128 else
                          "was killed by signal %d" % -code if code < 0 else "exited with code %d" % code)
            except ChildProcessError:
                status = "ended"
            self.supervisor = None
        return Outcome("runtime_error", "the candidate's process %s before the evaluation finished" %
                       (status or "ended"), reason="process_died")

    # -- the wire ---------------------------------------------------------------------------
    def recv(self, lazy=False):
        try:
            with self.clock("waiting_for_candidate"):
                return channel.recv(self.sock, self.device, lazy=lazy)
        except channel.ChannelClosed:
            raise self.died()
        except ValueError as e:
            raise Hack("protocol", "the candidate's process sent a malformed message: %s" % e)

    def ask(self, message, expect, lazy=False, value=None, deadline=None):
        """Send a command (with `value`: tensors beside it, in a sealed memfd: never the judge's own
        memory by CUDA IPC) and return its reply, whose type must be in `expect`; load_inline build
        requests are served meanwhile; a failure the candidate reports ends the evaluation. With a
        deadline (time.perf_counter()), None when nothing has come by then."""
        self.hand_back_cache()
        try:
            channel.send(self.sock, message, value)
        except channel.ChannelClosed:
            raise self.died()
        if deadline is not None and not select.select([self.sock], [], [], max(0.0, deadline - time.perf_counter()))[0]:
            return None
        return self.answer(expect, message.get("type"), lazy)

    def hand_back_cache(self):
        """The judge's cached and unused GPU memory handed back to the device where it is more than
        IDLE_CACHE_BYTES: whatever the candidate's process is asked to do next, the judge's own leftovers
        (a float64 run's, a stress draw's) never leave it short (a -1 of anvil's making)."""
        if self.device.type == "cuda":
            cuda = self.torch.cuda
            if cuda.memory_reserved(self.device) - cuda.memory_allocated(self.device) > IDLE_CACHE_BYTES:
                self.free_cached()

    def answer(self, expect, asked, lazy=False):
        """The reply to the command `asked`, of a type in `expect` (ask()'s second half)."""
        while True:
            msg = self.recv(lazy=lazy)
            kind = msg.get("type")
            if kind == "build":
                self.serve_build(msg)
                continue
            if kind == "fail":
                outcome = msg.get("outcome")
                if not isinstance(outcome, str) or (self.imported and outcome not in OUTCOMES_AFTER_IMPORT):
                    outcome = "runtime_error"
                reason = msg.get("reason")  # one the judge knows, or none: the result's reason is a name
                failed = Outcome(outcome or "runtime_error", str(msg.get("message", ""))[:4000],
                                 str(msg.get("detail", ""))[:8000],
                                 reason=reason if (outcome == "wrong_answer" and reason in WRONG_REASONS)
                                 or (outcome, reason) in CANDIDATE_REASONS else None)
                raise self.memory_short(failed) if failed.reason == "gpu_memory" else failed
            if kind == "hack":  # the process's own evidence against itself, under a reason the judge knows
                reason = msg.get("reason") if msg.get("reason") in REASONS else "protocol"
                evidence_ = msg.get("evidence") if isinstance(msg.get("evidence"), dict) else {}
                raise Hack(reason, str(msg.get("message", ""))[:4000], evidence_)
            if kind in expect:
                return msg
            raise Hack("protocol", "the candidate's process answered %r to %r (expected %s): the judge drives the "
                       "evaluation and every step must be answered in order" % (kind, asked, " or ".join(expect)))

    def serve_build(self, msg):
        from anvil import load_inline

        with self.clock("build"):
            spec = msg.get("spec")
            try:  # what the candidate's process asks is checked before any of it reaches a path
                reply = load_inline.build_spec_locally(spec, self.inline_dir(), self.req["candidate_dir"])
            except OSError as e:  # its names, paths and flags are its own: its load_inline raises (load_error)
                reply = {"ok": False, "error": "Error building extension: %s" % e}
        channel.send(self.sock, {"type": "built", "reply": reply})

    def hello(self):
        msg = self.recv()
        if msg.get("type") in ("confinement_failed", "cannot_serve"):  # set-up: trusted, no candidate code yet
            from anvil.harness import CannotServe

            if msg["type"] == "cannot_serve":
                raise CannotServe("the candidate's process could not be set up: %s" % msg.get("message"))
            raise CannotServe("the candidate's process could not be confined, so it was not run: %s" % msg.get("message"))
        if msg.get("type") == "fail":
            raise Outcome(msg.get("outcome") or "runtime_error", str(msg.get("message", "")),
                          str(msg.get("detail", "")))
        if msg.get("type") != "hello":
            raise Hack("protocol", "the candidate's process began with %r instead of hello" % msg.get("type"))
        self.report["defenses"]["sandbox"] = msg.get("sandbox")
        self.candidate_pid()

    def load(self):
        # From here on candidate code exists: nothing that fails is the task's any more (probe_task
        # ran everything of the task this evaluation uses), and whatever the judge cannot handle of
        # what the candidate's process sends or does is the candidate's (runner._STAGE_OUTCOME).
        self.stage = "candidate"
        self.imported = True
        sets = self.blind_sets()
        msg = self.ask(dict({"type": "load"}, **({"sets": sets} if sets else {})), ("loaded", "stress_draws_differ"))
        while msg.get("type") == "stress_draws_differ":  # its draw of a stress set came out otherwise: the judge's
            slot = msg.get("slot")
            if not sets or not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < len(self.slots) \
                    or self.slots[slot][0] != "stress":
                raise Hack("protocol", "the candidate's process said its draw of set %r differs, which is no stress "
                           "set" % (slot,))
            trial = self.stress_plan[self.slots[slot][1]]
            trial["inputs_came"] = "sent"
            msg = self.ask({"type": "stress_inputs"}, ("loaded", "stress_draws_differ"),
                           value=self.stress_inputs_sent(trial))
        if msg.get("weights"):  # the candidate's process's word, shown only: the outputs decide
            self.report["verify"]["weights"] = str(msg["weights"])[:300]
        with self.clock("kernel_names"):
            self.loaded(msg.get("modules") or [])

    def blind_sets(self):
        """The verification's sets, the trials' and the stress trials', in an order drawn in secret,
        for the candidate's process to hold before its code exists (CandidateServer.blind): each
        call then names a set by its place alone, so that process cannot tell a stress call from a
        trial's by what it is asked, only by the values it is given (docs/anti-hacking.md). Each
        set is called twice. A lean task's sets are drawn for each call (no room to keep them):
        none; its stress trials are asked for as such (verify). Returns the sets' descriptions
        (self.slots: ("trial", i) or ("stress", j) for each), or None."""
        if self.lean or not self.stress_plan:
            return None
        slots = [("trial", i) for i in range(self.req["trials"])] + [("stress", j) for j in range(len(self.stress_plan))]
        random.SystemRandom().shuffle(slots)
        self.slots = slots
        sets = []
        for kind, i in slots:
            if kind == "trial":
                sets.append({"trial": i})
            else:
                trial = self.stress_plan[i]
                trial["inputs_came"] = "drawn there"
                sets.append({"stress": {"name": trial["name"], "seed": trial["seed"], "digest": trial["digest"]}})
        return sets

    def loaded(self, modules):
        if self.device.type != "cuda":
            return
        tops = [os.path.dirname(os.path.abspath(self.req["candidate_dir"]))]
        if os.environ.get("ANVIL_CACHE"):
            tops.append(os.path.realpath(os.environ["ANVIL_CACHE"]))
        mine = [m for m in modules if isinstance(m, str) and
                any(os.path.realpath(m).startswith(t.rstrip("/") + "/") for t in tops)]
        tool = evidence.find_cuobjdump(self.defenses.get("cuobjdump"))
        self.report["defenses"]["modules"] = mine
        if tool is None:
            self.report["defenses"]["own_kernels"] = "unknown: cuobjdump not found"
            return
        self.own_names = evidence.kernel_names(mine, tool)
        self.report["defenses"]["own_kernels"] = sorted(n for n in self.own_names if "(" not in n)[:50]

    # -- verification -------------------------------------------------------------------------
    def expected_for(self, trial):
        """Trial `trial`'s reference output: kept since probe_task ran it (within KEEP_EXPECTED_BYTES
        of kept outputs, never for a lean task), else run again, its inputs drawn again when lean."""
        if trial in self.expected:
            return self.expected[trial]
        if self.current is not None and self.current[0] == trial:
            return self.current[1]
        seed = self.trial_seed(trial)
        self.current = None  # one trial's reference alive at a time beyond the kept ones
        if trial == 0:
            first = self.check_reference(seed)
            if self.lean:  # every timed call of the claim has trial 0's inputs (Harness.call_inputs)
                self.timed_expected = first
            # (name, numel, a stand-in of its dtype): what the batches sample, without the output itself
            self.signature = [(n, t.numel(), t.new_empty(0)) if isinstance(t, self.torch.Tensor) else (n, None, t)
                              for n, t in leaves(first)]
        else:
            first = self.call_reference(self.trial_inputs(trial), "trial %d (seed %d)" % (trial, seed),
                                        clone=not self.lean)
            bad = output_compare.nonfinite(first)
            if bad:
                raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        if self.lean:
            self.free_cached()  # the draw's blocks, for the candidate's process
        kept = sum(tensor_bytes(v) for v in self.expected.values())
        if not self.lean and kept + tensor_bytes(first) <= KEEP_EXPECTED_BYTES:
            self.expected[trial] = first
        else:
            self.current = (trial, first)
        return first

    def probe_task(self):
        """Everything of the task this evaluation uses, run before any candidate code exists: the
        reference on every trial's inputs (its output finite; trial 0's twice, deterministic:
        check_reference, in set_up) and on the stress trials' (plan_stress). A task_error is decided
        here or nowhere: once the candidate's code exists, a failure of the judge is the candidate's
        (load). Also draws the verification calls checked against float64 (draw_checks)."""
        self.stage = "task"
        for i in range(1, self.req["trials"]):
            self.expected_for(i)
        with self.clock("stress_plan"):
            self.plan_stress()
        if "candidate" in self.req["timing"]["measure"]:
            with self.clock("peaks"):
                self.measure_peaks()
        self.draw_checks()
        self.note_memory("probed")

    def draw_checks(self):
        """The verification calls whose outputs are checked against a float64 run of the reference
        (PRECISION_CALLS of the 2 x trials, drawn in secret: every output is compared with the
        reference anyway, so nothing tells the candidate's process which)."""
        calls = [(i, c) for i in range(self.req["trials"]) for c in (0, 1)]
        self.precision_at = set(random.SystemRandom().sample(calls, min(PRECISION_CALLS, len(calls))))

    # -- the stress trials (anvil.stress) --------------------------------------------------------
    def plan_stress(self):
        """This evaluation's stress trials: `stress.trials` (share/protocol.json's stress_trials
        unless the request says) of the distributions anvil vet found usable for the task (the
        request's stress.rules; every one when vet gave none, the judge then deciding each on its
        own draw), one of each family in turn (stress.FAMILIES), picked and drawn with seeds drawn
        in secret. The reference runs on each now, and its float64 run where the rule needs it; a
        draw whose reference is not usable there is left out (its reason in defenses.stress)."""
        want = (self.req.get("stress") or {}).get("trials")
        want = share.checks()["stress_trials"] if want is None else want
        rules = (self.req.get("stress") or {}).get("rules")
        rng = random.SystemRandom()
        report = self.report["defenses"].setdefault("stress", {"trials": want, "planned": [], "skipped": []})
        if not want or self.req["candidate_kind"] == "none":
            return
        names = [n for n in stress.DISTRIBUTIONS if not isinstance(rules, dict) or not rules
                 or (rules.get(n) or {}).get("rule") in stress.RULES + ("unknown",)]
        if isinstance(rules, dict) and rules and not names:
            report["skipped"].append({"why": "anvil vet found no distribution usable for this task: %s" % "; ".join(
                "%s: %s" % (n, (rules.get(n) or {}).get("why", "?")) for n in stress.DISTRIBUTIONS)[:600]})
            return
        if self.device.type == "cuda" and self.memory["output_bytes"] > KEEP_STRESS_BYTES:
            # Known from trial 0 before anything is drawn: each trial's answer is kept until the verification
            # (below), so none would be; a lean elementwise task's outputs of gigabytes are not worth a draw
            report["skipped"].append({"why": "its output (%.1f GiB) is too large to keep until the verification" % (
                self.memory["output_bytes"] / float(1 << 30))})
            return
        for _ in range(want + 2):  # a draw whose reference is unusable there costs a try
            if len(self.stress_plan) >= want or not names:
                break
            family = stress.FAMILIES[len(self.stress_plan) % len(stress.FAMILIES)]
            name = rng.choice([n for n in names if n in family] or names)
            names.remove(name)
            seed = rng.randrange(1 << 62)
            try:
                with self.clock("stress_draws"):
                    inputs, changed = stress.draw(self, name, seed)
            except Outcome as e:  # inputs the task never promised may be ones its get_inputs() refuses
                report["skipped"].append({"distribution": name, "why": e.message[:300]})
                continue
            if not changed:
                report["skipped"].append({"why": "get_inputs() draws no random float tensor to transform"})
                return
            known = (rules.get(name) or {}) if isinstance(rules, dict) else {}
            with self.clock("stress_reference"):
                ref32, why = self.stress_reference(lambda x=inputs: self.ref(*map_tensors(x, lambda t: t.clone())))
            ref64 = None
            if ref32 is not None and known.get("rule") == "reference":
                # anvil vet found the float32 reference within the rule's margin of float64 on two draws:
                # its finiteness here is all that is left to check (no float64 run per evaluation)
                found = stress.confirm(ref32, known.get("reference_error"))
            elif ref32 is not None:
                with self.clock("stress_reference"):
                    ref64, why = self.stress_reference(lambda x=inputs: evidence.float64_run(self.ref, x), "in float64")
                found = stress.condition(ref32, ref64) if ref64 is not None else {"rule": None, "why": why}
            else:
                found = {"rule": None, "why": why}
            if found["rule"] is None:
                report["skipped"].append({"distribution": name, "why": found["why"]})
                del ref32, ref64, inputs
                continue
            answer = ref32 if found["rule"] == "reference" else ref64
            if self.device.type == "cuda" and tensor_bytes(ref32) + (tensor_bytes(ref64) if ref64 is not None and
                                                                     answer is ref64 else 0) > KEEP_STRESS_BYTES:
                # Kept until the verification, beside everything else: a lean elementwise task's outputs of
                # gigabytes are not (the shortcuts these trials catch are reductions', whose outputs are small)
                report["skipped"].append({"distribution": name, "why": "its output (%.1f GiB) is too large to keep "
                                          "until the verification" % (tensor_bytes(ref32) / float(1 << 30))})
                del ref32, ref64, inputs, answer
                self.free_cached()
                break
            with self.clock("stress_digests"):
                digest = trial_digest(inputs)
            # The candidate's process draws them itself from the seed, as the judge did (their digests must
            # agree); the judge keeps its own (not a lean task's: drawn again) for a process that draws otherwise.
            self.stress_plan.append({"name": name, "seed": seed, "rule": found["rule"], "digest": digest,
                                     "reference_error": found["reference_error"], "where": "stress trial %s" % name,
                                     "inputs": None if self.lean else inputs,
                                     "like": ref32, "answer": answer})
            report["planned"].append({"distribution": name, "rule": found["rule"],
                                      "reference_error": found["reference_error"]})
            del ref32, ref64, answer, inputs
            if self.lean:
                self.free_cached()

    def stress_inputs_sent(self, trial):
        """A stress trial's inputs as the judge drew them, for a candidate process whose own draws
        came out otherwise: as bytes in a sealed memfd, never by CUDA IPC (a mapping of the judge's own
        allocation would let that process write whatever else the judge keeps there). A lean task's
        are drawn again; where they come out otherwise too (a get_inputs() with state its seed does not
        reset), they are sent all the same and the trial is not judged (trial["unjudged"] says why):
        its answer is of the first draw."""
        inputs = trial.pop("inputs", None)
        if inputs is None:
            inputs = stress.draw(self, trial["name"], trial["seed"])[0]
            if trial_digest(inputs) != trial["digest"]:
                trial["unjudged"] = ("get_inputs() draws otherwise on the same seed (a lean task's inputs are "
                                     "drawn again, not kept)")
        return map_tensors(inputs, lambda t: t.detach().cpu())

    def stress_reference(self, run, how=""):
        """(output, None) of run() (the reference on a stress draw, flags pinned, synchronised), or
        (None, why) where it fails: inputs the task never promised may be outside what its
        reference can take, which is no fault of the task's (the distribution is left out), and a
        GPU too small for a float64 run beside the evaluation leaves it out too."""
        self.pin_flags()
        try:
            with self.torch.no_grad():
                out = run()
            self.sync()
            return out, None
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - see the docstring
            self.free_cached()
            if memory_error(e, self.torch) is not None:
                return None, "the reference's run %s does not fit in the GPU's memory beside the evaluation" % how
            return None, "the reference %s raised %s" % (how or "there", what_of(e))

    def judge_stress(self, j, msg, call=0):
        """The candidate's output on stress trial j (stress.judge: a gross error is wrong_answer),
        recorded in verify.stress once (its first call, or the call that fails)."""
        trial = self.stress_plan[j]
        got = msg.get("value")
        self.check_ops(msg, trial.get("where"))  # what every verification call is held to first, whichever set
        if trial.get("unjudged"):
            if call == 0:
                self.report["defenses"]["stress"]["skipped"].append({"distribution": trial["name"],
                                                                     "why": trial["unjudged"]})
            return
        answer, like = trial["answer"], trial["like"]
        self.check_dtypes(got, like, trial["where"])
        lines = stress.judge(got, answer, like, trial["rule"], trial["reference_error"])
        if lines:
            self.unwritten(got, like, trial["where"], lines)
        if call == 0 or lines:
            self.report["verify"].setdefault("stress", []).append({"distribution": trial["name"], "ok": not lines,
                                                                   "inputs": trial.get("inputs_came"),
                                                                   "report": "\n".join(lines)})
        if lines:
            raise Outcome("wrong_answer", "%s: the output is grossly wrong on inputs the task's get_inputs() does "
                          "not make (%s): %s. A kernel must compute the operation for any valid input, not only "
                          "for the task's distribution (no subsampling, no closed-form answer)" % (
                              trial["where"], STRESS_TEXT[trial["name"]], lines[0]),
                          tail("\n".join(lines), DETAIL_LINES), reason="mismatch")

    def first_inputs(self):
        """Trial 0's inputs: kept (self.pristine0), or, lean, drawn again (the caller's own)."""
        return self.trial_inputs(0) if self.lean else self.pristine0

    def set_bytes(self):
        """One set of inputs, in bytes."""
        return self.input_bytes if self.input_bytes is not None else tensor_bytes(self.first_inputs())

    def call_reference(self, pristine, where, events=None, clone=True):
        """The reference on clones of `pristine` (clone=False: on `pristine` itself, a draw of the
        caller's that nothing else uses), synchronised; with `events` (two CUDA events), those
        recorded around the call alone."""
        self.pin_flags()
        args = map_tensors(pristine, lambda t: t.clone()) if clone else pristine
        del pristine
        if events:
            events[0].record()
        out = self.reference_on(args, where)
        if events:
            events[1].record()
        try:
            self.sync()
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", "%s: %s" % (where, raised(e, "the reference Model")), trace(e))
        return out

    def reference_on(self, args, where):
        """The reference on `args` themselves (not synchronised; flags pinned by the caller)."""
        try:
            with self.torch.no_grad():
                return self.ref(*args)
        except BaseException as e:  # noqa: BLE001
            if memory_error(e, self.torch) is not None:  # whose fault: measured (memory_fault)
                self.memory_fault("in the judge's reference (%s)" % where, memory_error(e, self.torch))
            raise Outcome("task_error", "%s: %s" % (where, raised(e, "the reference Model")), trace(e))

    def check_reference(self, seed):
        """Trial 0's reference twice (non-determinism is the task's fault); the second call, timed
        (on a GPU, the GPU's time), sizes eager's batch. Keeps trial 0's inputs (self.pristine0),
        unless lean: then each call has a draw of its own."""
        where = "reference check (seed %d)" % seed
        self.pristine0 = None if self.lean else self.trial_inputs(0)
        first = self.call_reference(self.first_inputs(), where, clone=not self.lean)
        bad = output_compare.nonfinite(first)
        if bad:
            raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        # on a GPU the GPU's time of the call (a wall clock would count its launch and synchronise)
        events = [self.torch.cuda.Event(enable_timing=True) for _ in range(2)] if self.device.type == "cuda" else None
        start = time.perf_counter()
        second = self.call_reference(self.first_inputs(), where, events, clone=not self.lean)
        self.ref_ms = events[0].elapsed_time(events[1]) if events else (time.perf_counter() - start) * 1e3
        lines = output_compare.compare(second, first, self.req["tolerance"])
        if lines:
            raise Outcome("task_error", "the reference is non-deterministic: two runs on the inputs of seed %d "
                          "differ: %s" % (seed, "\n".join(lines)))
        return first

    def note_memory(self, where):
        """What the judge's process holds of the GPU at `where`, and what is free (the report's
        defenses.memory_timeline: the evidence when a large task runs a GPU out of memory)."""
        if self.device is None or self.device.type != "cuda":
            return
        timeline = self.report["defenses"].setdefault("memory_timeline", [])
        if len(timeline) < 64:
            free, _total = self.torch.cuda.mem_get_info(self.device)
            timeline.append({"at": where, "allocated_bytes": self.torch.cuda.memory_allocated(self.device),
                             "reserved_bytes": self.torch.cuda.memory_reserved(self.device), "free_bytes": free})

    def verify(self):
        """The trials (two calls each) and the stress trials (on inputs the task does not make:
        stress): blind (blind_sets), every set called twice in the order drawn in secret, the
        candidate's process naming none; lean, the trials, then each stress trial once, asked for as
        such. Each output is compared with the judge's own reference; the calls drawn in secret
        (draw_checks) are also checked against float64."""
        self.stage = "verify"
        self.note_memory("verify")
        trials = self.req["trials"]
        stress_failed = None  # blind: a stress set's failure waits for the trials' (theirs, on the task's own inputs, come first)
        for slot, (kind, i) in enumerate(self.slots or ()):  # blind: the sets in the candidate's process's order
            for c in range(2):
                self.note_memory("set %d call %d" % (slot, c))
                msg = self.ask({"type": "call", "trial": slot, "call": c}, ("output",))
                self.echoed(msg, slot, c)
                if kind == "trial":
                    with self.clock("outputs"):
                        self.judge_output(i, c, msg)
                elif stress_failed is None:
                    try:
                        with self.clock("stress_outputs"):
                            self.judge_stress(i, msg, c)
                    except (Outcome, Hack) as e:
                        stress_failed = e
        if stress_failed is not None:
            raise stress_failed
        for i in range(trials) if self.slots is None else ():
            if self.lean:  # the reference first, its inputs gone before the candidate's process draws its own
                with self.clock("outputs"):
                    self.expected_for(i)
            for c in range(2):
                self.note_memory("trial %d call %d" % (i, c))
                msg = self.ask({"type": "call", "trial": i, "call": c}, ("output",))
                self.echoed(msg, i, c)
                with self.clock("outputs"):
                    self.judge_output(i, c, msg)
        for j, trial in enumerate(self.stress_plan if self.slots is None else ()):
            self.note_memory("stress trial %d" % j)
            # The candidate's process draws them as the judge did, from the seed given now: nothing crosses,
            # unless its draws' digest differs from the judge's (stress_inputs)
            msg = self.ask({"type": "call", "trial": trials + j, "call": 0,
                            "stress": {"name": trial["name"], "seed": trial["seed"], "digest": trial["digest"]}},
                           ("output", "stress_draws_differ"))
            trial["inputs_came"] = "drawn there"
            if msg.get("type") == "stress_draws_differ":
                msg = self.ask({"type": "stress_inputs"}, ("output",), value=self.stress_inputs_sent(trial))
                trial["inputs_came"] = "sent"
            self.echoed(msg, trials + j, 0)
            with self.clock("stress_outputs"):
                self.judge_stress(j, msg)
        self.stress_plan = []
        # The timing's base sets keep their answers (every timed call of the claim is checked against one)
        self.expected = {i: v for i, v in self.expected.items() if i < self.req["timing"]["input_sets"]}
        self.current = None
        self.forget_trials()

    @staticmethod
    def echoed(msg, trial, call):
        if msg.get("trial") != trial or msg.get("call") != call:
            raise Hack("protocol", "the candidate's process answered trial %r call %r when asked for trial %d call %d"
                       % (msg.get("trial"), msg.get("call"), trial, call))

    def judge_output(self, trial, call, msg):
        seed = self.trial_seed(trial)
        where = "trial %d (seed %d)%s" % (trial, seed, ", second call" if call else "")
        expected = self.expected_for(trial)  # first: a broken task outranks the candidate's faults
        self.check_ops(msg, where)
        got = msg.get("value")
        self.check_dtypes(got, expected, where)
        lines = output_compare.compare(got, expected, self.req["tolerance"])
        verify = self.report["verify"]
        if call == 1 or lines:
            verify["trials"].append({"seed": seed, "ok": not lines, "report": "\n".join(lines)})
            verify["passed" if not lines else "failed"] += 1
        if lines:
            self.unwritten(got, expected, where, lines)
            hint = SEEDED_HINT if verify.get("weights") else ""
            raise Outcome("wrong_answer", "%s, %s%s" % (where, "\n".join(lines), hint),
                          tail("\n".join(lines), DETAIL_LINES), reason="mismatch")
        if (trial, call) in self.precision_at:
            with self.clock("precision"):
                self.check_precision(got, expected, where, self.trial_source(trial))
        if trial == 0 and call == 0:
            with self.clock("count_work"):
                self.count_work(expected)

    @staticmethod
    def unwritten(got, expected, where, lines):
        """A wrong output (`lines`) that still holds the NaN sentinel of fresh memory where the
        answer is finite: wrong_answer / unwritten_output, whichever set the call was on."""
        count = sum(evidence.sentinel_count(g, e) for _n, g, e in evidence.floating_leaves(got, expected))
        if count:
            raise Outcome("wrong_answer", "%s: %d output elements were never written (they still hold the NaN "
                          "sentinel that fills fresh memory)\n%s" % (where, count, "\n".join(lines)),
                          reason="unwritten_output")

    def trial_source(self, trial):
        """A function giving trial `trial`'s inputs for a float64 run, now or after the candidate's
        process is gone (precision_run): kept (a lean task's drawn again, by its seed)."""
        if self.lean:
            return lambda: self.trial_inputs(trial)
        inputs = self.trial_inputs(trial)
        return lambda: inputs

    def check_ops(self, msg, where):
        """torch_fallback where a verification call's recorded ops (msg["ops"]) hold one the policy forbids."""
        ops = policy.forbidden(self.defenses["policy"], msg.get("ops"))
        if ops:
            raise Hack("torch_fallback", self._ops_message(ops, where), {"ops": ops})

    @staticmethod
    def _ops_message(ops, where):
        names = ", ".join("%s (x%d)" % (k, v) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
        return ("%s: the candidate's forward computed with torch instead of its own kernels: %s. Only tensor "
                "creation, views, metadata and copies may run through torch; compute must be your kernels "
                "(cuBLAS/cuDNN from C++ where allowed)" % (where, names))

    def check_dtypes(self, got, expected, where):
        if self.defenses.get("allow_lower_precision"):
            return
        for name, g, e in evidence.floating_leaves(got, expected):
            gd, ed = output_compare.dtype_name(g.dtype), output_compare.dtype_name(e.dtype)
            if gd in evidence.LOWER.get(ed, ()):
                raise Hack("precision", "%s: %s is %s but the reference's is %s: a lower-precision output is not "
                           "allowed" % (where, name, gd, ed))

    def check_precision(self, got, expected, where, source):
        """Accuracy against a float64 run of the reference on the call's inputs (source(): them);
        a candidate much less accurate than the reference itself computed at a lower precision
        (TF32, fp16). Made at calls drawn in secret (draw_checks, the claim's and the batch's);
        the worst of them decides (findings.precision)."""
        if self.defenses.get("allow_lower_precision") or self.req["flags"].get("allow_tf32"):
            self.note_precision(where, {"checked": False, "why": "lower precision allowed"})
            return
        pairs = [(n, g, e) for n, g, e in evidence.floating_leaves(got, expected)
                 if output_compare.dtype_name(e.dtype) in evidence.PRECISION_FLOOR]
        if not pairs:
            self.note_precision(where, {"checked": False, "why": "no float32/float64 output"})
            return
        bound = evidence.precision_bound(pairs, self.defenses["precision_ratio"])
        if bound is not None:
            self.note_precision(where, bound)
            return
        self.precision_run(where, pairs, source, deferrable=True)

    def precision_run(self, where, pairs, source, deferrable):
        """The float64 run for check_precision. When it does not fit beside the candidate's process
        (which may hold memory for just that), the pairs and the inputs go to the host and the run
        waits for the candidate's process to be gone (finish_precision): never skipped while it
        lives."""
        torch = self.torch
        try:
            self.pin_flags()
            out64 = evidence.float64_run(self.ref, source())
            self.sync()
        except (Outcome, RequestError):  # a memory fault already decided (memory_fault)
            raise
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            self.free_cached()
            held = sum(tensor_bytes([g, x]) for _w, p, _s in self.precision_later for _n, g, x in p)
            size = sum(tensor_bytes([g, x]) for _n, g, x in pairs)
            if memory_error(e, torch) and deferrable and held + size > DEFER_HOST_BYTES and \
                    not where.startswith("trial "):
                self.note_precision(where, {"checked": False, "why": "not deferred: the float64 runs waiting for the "
                                            "candidate's process hold %.1f GiB of the host already" % (held / 2.0 ** 30)})
                return
            if memory_error(e, torch):
                if deferrable:
                    host = [(n, g.detach().cpu(), x.detach().cpu()) for n, g, x in pairs]
                    inputs = source() if not self.lean else None
                    kept = map_tensors(inputs, lambda t: t.detach().cpu()) if inputs is not None else None
                    self.precision_later.append((where, host, (lambda: kept) if kept is not None else source))
                    self.note_precision(where, {"checked": False, "why": "deferred: the float64 run waits for the "
                                                "candidate's process to be gone"}, pending=True)
                else:
                    self.note_precision(where, {"checked": False, "why": "a float64 run of the reference does not fit "
                                                "in the GPU's memory"})
                return
            # a model without float64 support: not checked
            self.note_precision(where, {"checked": False, "why": "the reference does not run in float64: %s" %
                                        raised(e, "it")})
            return
        self.note_precision(where, evidence.precision_against(pairs, out64, self.defenses["precision_ratio"]))

    def note_precision(self, where, found, pending=False):
        """One precision check's result (at `where`): listed in defenses.precision_checks; the
        worst (the largest error against its limit) is judge.precision, which findings.precision
        reads."""
        entry = dict(found, at=where)
        if not pending:
            self.precision_checks.append(entry)

        def badness(p):
            if not p or not p.get("checked") or p.get("candidate_error") is None:
                return -1.0 if p and p.get("checked") else -2.0
            return p["candidate_error"] / p["limit"] if p["limit"] else float("inf")

        if not pending and (self.precision is None or badness(entry) > badness(self.precision)):
            self.precision = entry

    def room_for(self, total, staging=True):
        """The batch's Room, grown to `total` bytes: a pool the GPU has no memory for is a memory fault."""
        try:
            return self.room.ensure(total, staging=staging)
        except (batch.BatchError, RuntimeError) as e:
            if "out of memory" in str(e) or memory_error(e, self.torch) is not None:
                self.memory_fault("making the judge's batch pool", e)
            raise

    def memory_allowance(self):
        """The most GPU memory an honest candidate's process may hold, generously: two contexts'
        worth (its own, with its libraries' handles and workspaces) and 1 GiB, its weights, the sets
        of inputs it keeps and two more, four outputs and a batch's, twice the reference's working
        memory; and half again."""
        m = self.memory
        sets = (0 if self.lean else self.req["trials"]) + 2
        # A context's worth: what the GPU held when the judge's CUDA started, its own context and
        # whatever else was there; in a wave that is the wave-mates' memory too, so there at most
        # JUDGE_CONTEXT_BYTES (a context with its libraries' handles: about 0.6 GiB on a Hopper).
        context = min(m["context_bytes"], JUDGE_CONTEXT_BYTES) if self.together() else m["context_bytes"]
        need = (2 * context + (1 << 30) + tensor_bytes(list(self.ref.state_dict().values()))
                + sets * (self.input_bytes or 0) + (4 + m["batch_calls"]) * m["output_bytes"]
                + 2 * m["reference_work_bytes"])
        return int(1.5 * need)

    def memory_fault(self, doing, e):
        """The GPU ran out of memory for the judge's own work (`doing`) while the candidate's
        process lived, which may hold memory to cause just that (a -1 turned into "could not
        evaluate", or a check skipped). Whose fault is measured, not assumed: the candidate's
        process is ended, and the memory its end gives back is what it held. More than
        memory_allowance() is the candidate's fault (runtime_error, gpu_memory); less, anvil's
        limit (CannotServe). Without a live candidate process: anvil's limit."""
        from anvil.harness import CannotServe

        if not self.candidate_alive_on_gpu():
            Harness.memory_fault(self, doing, e)
        self.freeze_candidate()  # nothing of it frees memory before it is measured
        held, allowance = self.candidate_held(), self.memory_allowance()
        self.report["defenses"]["memory"] = dict(self.memory, doing=doing, candidate_held_bytes=held,
                                                 allowance_bytes=allowance)
        gib = float(1 << 30)
        if held > allowance:
            raise Outcome("runtime_error", "the GPU ran out of memory %s while the candidate's process held %.1f GiB "
                          "of it, more than its work needs (at most %.1f GiB here: its context, weights, inputs, "
                          "outputs and twice the reference's working memory): free what forward does not need" % (
                              doing, held / gib, allowance / gib), reason="gpu_memory")
        raise CannotServe("the GPU ran out of memory %s (%s), the candidate's process holding %.1f GiB, within its "
                          "share (%.1f GiB): the task and anvil's copies do not fit here" % (
                              doing, one_line(str(e))[:160], held / gib, allowance / gib), memory_limited=True)

    def candidate_alive_on_gpu(self):
        return self.device is not None and self.device.type == "cuda" and self.supervisor is not None and \
            not self.candidate_gone

    def candidate_held(self):
        """The GPU memory the candidate's process held, measured (its processes stopped first:
        freeze_candidate, the caller's): it is ended, and the memory its end gives back is what it
        held. The judge's own mappings and cache are let go first, and
        its end of the channel closed: a descriptor of the GPU's device files the candidate's
        process sent down it, unread, would keep its memory alive past its end."""
        torch = self.torch
        if self.mapped is not None:  # the judge's mappings of its memory would keep that alive
            self.mapped.close()
            self.mapped = None
        from anvil import cuda_ipc

        cuda_ipc.close_all()
        self.close_channel()
        self.free_cached()
        before, _total = torch.cuda.mem_get_info(self.device)
        self.end_candidate(wait=True, settle=True)
        after, deadline = before, time.perf_counter() + 2.0
        while time.perf_counter() < deadline:  # a context's memory goes back as its process ends
            time.sleep(0.05)
            now, _total = torch.cuda.mem_get_info(self.device)
            if now == after and now > before:
                break
            after = now
        return max(0, after - before)

    def memory_short(self, failed):
        """The candidate's process says the GPU ran out of memory (`failed`, its gpu_memory
        runtime_error: its word). Prepared in a wave (together), the parked wave-mates' memory was
        beside it, memory it would have had alone. Measured, not taken on its word: the GPU's free
        memory once its processes are stopped (freeze_candidate: nothing of it frees or allocates
        from there on), then what its process held (candidate_held: its end gives it back), and what
        the others held (the GPU less its free memory, the judge's allocator and batch pools, a
        context's JUDGE_CONTEXT_BYTES and the candidate's process). The wave's doing, and so
        anvil's limit (CannotServe, memory_limited: anvil runs the evaluation again alone, once, on
        the same seed), only when its process held no more than its share (memory_allowance) and
        the others held more than a GiB and more than was free: alone it would have had at least
        twice the room. Else `failed` stands (returned). Prepared alone, the others are processes that
        are not this evaluation's (another job on the GPU): their memory is no more the candidate's
        fault, and the same measure decides."""
        from anvil.harness import CannotServe

        if not self.candidate_alive_on_gpu():
            return failed
        torch = self.torch
        self.freeze_candidate()  # what it holds stays as it was when it failed, until it is ended
        free, total = torch.cuda.mem_get_info(self.device)
        judge = torch.cuda.memory_reserved(self.device) + self.room_bytes() + JUDGE_CONTEXT_BYTES
        held, allowance = self.candidate_held(), self.memory_allowance()
        others = max(0, total - free - judge - held)
        together = self.together()
        self.report["defenses"]["memory"] = dict(self.memory, doing="the candidate's own work" + (", in a wave" if together else ""),
                                                 candidate_held_bytes=held, allowance_bytes=allowance,
                                                 free_bytes=free, others_bytes=others, judge_bytes=judge,
                                                 judge_allocated_bytes=int(torch.cuda.memory_allocated(self.device)))
        if held > allowance or others <= max(1 << 30, free):
            return failed
        gib = float(1 << 30)
        raise CannotServe("the GPU ran out of memory for the candidate's process (%s) while %s held %.1f GiB, more "
                          "than was free (%.1f GiB), its process holding %.1f GiB, within its share (%.1f GiB), the "
                          "judge %.1f GiB" % (
                              one_line(failed.message)[:160],
                              "the evaluations parked beside it" if together else "other processes on the GPU",
                              others / gib, free / gib, held / gib, allowance / gib, judge / gib), memory_limited=True)

    def freeze_candidate(self):
        """SIGSTOP every process below the judge (the candidate's, any it started, its namespace's
        init and the supervisor; twice, for one started meanwhile): nothing of the candidate runs,
        frees or allocates until end_candidate kills them."""
        for _ in range(2):
            for p in policy.descendants():
                self._kill(p, signal.SIGSTOP)

    def close_channel(self):
        """The judge's end of the channel shut and closed (nothing more is asked of the candidate's
        process): whatever it sent and the judge never read goes with it, descriptors included."""
        import socket

        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def room_bytes(self):
        """The judge's batch pools on the GPU (batch.Room: a cudaMalloc of their own, outside torch's
        allocator), the outgrown ones kept too."""
        if self.room is None:
            return 0
        pools = self.room.retired + ([self.room.pool] if self.room.pool is not None else [])
        return sum(p.nbytes for p in pools)

    def own_memory_fault(self, e):
        """An unexpected exception `e` of the judge's own work (a comparison's allocation, a
        digest's) that is the GPU's memory running out goes to memory_fault: measured, never blamed
        on the candidate unseen nor excused. Returns for any other exception (the caller raises it)."""
        from anvil.harness import CannotServe

        found = None if isinstance(e, (Outcome, CannotServe)) else memory_error(e, self.torch)
        if found is not None:
            self.memory_fault("in the judge's work during %s" % self.stage, found)

    def finish_precision(self):
        """The deferred float64 runs (precision_run), now that the candidate's process is gone."""
        if self.precision_later and self.supervisor is None:
            later, self.precision_later = self.precision_later, []
            with self.clock("precision_later"):
                for where, pairs, source in later:
                    def on_device(inputs=None):
                        return map_tensors(source(), lambda t: t.to(self.device))
                    pairs = [(n, g.to(self.device), x.to(self.device)) for n, g, x in pairs]
                    self.precision_run(where, pairs, on_device, deferrable=False)

    def count_work(self, expected):
        """Bytes the call must move and flops the reference does, for the roofline floor."""
        if self.device.type != "cuda":
            return
        nbytes = self.set_bytes() + tensor_bytes(expected)
        flops = 0
        try:
            from torch.utils.flop_counter import FlopCounterMode

            args = self.trial_inputs(0) if self.lean else map_tensors(self.pristine0, lambda t: t.clone())
            counter = FlopCounterMode(display=False)
            with self.torch.no_grad(), counter:
                self.ref(*args)
            flops = int(counter.get_total_flops())
            del args
        except (Outcome, RequestError):  # a memory fault already decided (memory_fault)
            raise
        except BaseException as e:  # noqa: BLE001 - no flop count: the floor uses bytes alone
            if memory_error(e, self.torch) is not None:
                self.memory_fault("counting the reference's work", memory_error(e, self.torch))
            flops = 0
        if self.lean:
            self.free_cached()
        self.roofline = {"bytes": nbytes, "flops": flops}

    # -- the candidate's claim: its in-process timing -----------------------------------------
    def schedule(self):
        """The phases of the in-process timing's calls, in order (timing.measure with a trace)."""
        t = self.req["timing"]
        probes = 3 if self.device.type == "cuda" and t.get("hide_launch", True) else 0
        return (["warmup"] * t["warmup"] + ["probe"] * probes + ["timed"] * t["calls"]
                + ["inspected"] * timing.inspected_calls(t["calls"]))

    def measure_peaks(self):
        """The device's peaks for the speed-of-light floor (those the request does not give),
        measured before any candidate code exists: anvil keeps measured peaks for later evaluations
        (eval.cpp remember_roofline), and work the candidate's code left running on the GPU would
        lower them, and with them every later candidate's floor."""
        if self.device.type != "cuda":
            return
        peaks = dict(self.defenses.get("roofline") or {})
        if not peaks.get("bandwidth_bytes_per_s"):
            peaks["bandwidth_bytes_per_s"] = evidence.measure_bandwidth(self.device)
            peaks["measured"] = True
        if not peaks.get("flops_per_s"):
            peaks["flops_per_s"] = evidence.measure_flops(self.device)
            peaks["measured"] = True
        self.sync()
        self.device_peaks = peaks

    def peaks(self):
        if self.device.type == "cuda" and self.roofline is not None and self.device_peaks is not None:
            self.roofline.update(self.device_peaks)

    def claimed_timing(self):
        """The candidate's in-process timing: every sample must come, in order, for the schedule.
        Every timed and inspected call hands its output over with its sample (CUDA IPC, left where
        it lies; on the CPU a sealed memfd), checked or not: the judge samples every one at
        positions it draws, compares a share of them in full (CHECK_SHARE, the last always) and one
        against float64, all decided in secret as each arrives."""
        plan = self.schedule()
        rng = random.SystemRandom()
        checked = [k for k, phase in enumerate(plan) if phase in ("timed", "inspected")]
        precise = rng.choice(checked) if checked else None
        samples = []
        msg = self.ask({"type": "time"}, ("sample", "timing"), lazy=True)
        for k, phase in enumerate(plan):
            if msg.get("type") != "sample" or msg.get("k") != k or msg.get("phase") != phase:
                raise Hack("protocol", "in-process timing: expected the sample of call %d (%s), got %r (call %r, %r)"
                           % (k, phase, msg.get("type"), msg.get("k"), msg.get("phase")))
            if phase == "timed":
                ms = msg.get("ms")
                if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not math.isfinite(ms) or ms < 0:
                    raise Hack("protocol", "in-process timing: call %d's sample %r is not a time" % (k, ms))
                samples.append(float(ms))
            if phase in ("timed", "inspected"):
                if "value" not in msg:
                    raise Hack("protocol", "in-process timing: call %d's sample came without its output" % k)
                full = k == precise or k == checked[-1] or rng.random() < CHECK_SHARE
                with self.clock("timed_outputs"):
                    self.judge_timed_output(k, msg["value"], full, k == precise, rng)
            elif "value" in msg:
                raise Hack("protocol", "in-process timing: call %d (%s) sent an output that was not asked for" % (k, phase))
            msg = self.ask({"type": "next"}, ("sample", "timing"), lazy=True)
        if msg.get("type") != "timing":
            raise Hack("protocol", "in-process timing: more calls than the %d asked for" % len(plan))
        if self.timed_expected is not None:
            self.timed_expected = None
            self.free_cached()
        result = timing.summarize(samples)
        claim = msg.get("result") if isinstance(msg.get("result"), dict) else {}
        for key in ("host_enqueue_ms", "gpu_sleep_ms", "late_calls", "kernel_sum_ms", "kernel_sum_error", "seconds"):
            if key in claim:
                result[key] = claim[key]
        self.trace = msg.get("trace") if isinstance(msg.get("trace"), dict) else None
        self.done_ops = msg.get("ops") if isinstance(msg.get("ops"), dict) else {}
        self.report["defenses"]["seconds"]["candidate"] = msg.get("clock") if isinstance(msg.get("clock"), dict) else {}
        self.report["defenses"]["timed_outputs"] = {"sampled": self.timed_checked, "full": self.timed_full,
                                                    "samples_per_output": batch.SAMPLES}
        return result

    def timed_answer(self, k):
        """The reference's output for timed call k (the judge's own, run on its own copy of the
        call's inputs): its base set's (Harness.call_inputs: base set k % input_sets, a trial's,
        kept since verification), or, lean, trial 0's."""
        if self.lean:
            return self.timed_expected
        j = k % self.req["timing"]["input_sets"]
        if j not in self.expected:
            self.pin_flags()
            self.expected[j] = self.call_reference(self.trial_inputs(j), "timed call %d's reference" % k)
        return self.expected[j]

    def judge_timed_output(self, k, value, full, precise, rng):
        """Timed call k's output (`value`: Remotes into the candidate's process's memory on a GPU,
        tensors on the CPU): SAMPLES elements of every output at positions drawn now, against the
        reference's; with `full`, every element; with `precise`, also against float64."""
        expected = self.timed_answer(k)
        got = localize(value, self.mapped_memory()) if full else value
        self.timed_checked += 1
        if full:
            self.timed_full += 1
            lines = output_compare.compare(got, expected, self.req["tolerance"])
        else:
            lines = self.sampled_mismatch(got, expected, rng)
        if lines:
            raise Hack("timed_output_mismatch", "timed call %d (the inputs of seed %d) returned an output that is not "
                       "the answer for its inputs, though verification passed: outputs must be computed from each "
                       "call's inputs, never cached or reused. %s" % (
                           k, self.trial_seed(0 if self.lean else k % self.req["timing"]["input_sets"]),
                           lines[0]))
        if precise:
            j = 0 if self.lean else k % self.req["timing"]["input_sets"]
            self.check_precision(got, expected, "timed call %d" % k, self.trial_source(j))

    def mapped_memory(self):
        self.mapped = self.mapped or batch.Mapped()
        return self.mapped

    def sampled_mismatch(self, value, expected, rng):
        """Mismatch lines of `value` (one call's output, its tensors Remote or local) against
        `expected` at batch.SAMPLES positions of each output drawn from `rng`: the structure and
        shapes first, then the samples (batch.compare_samples)."""
        torch = self.torch
        got_leaves, exp_leaves = list(leaves(value)), list(leaves(expected))
        if len(got_leaves) != len(exp_leaves):
            return ["the output has %d parts, the reference's %d" % (len(got_leaves), len(exp_leaves))]
        generator = torch.Generator().manual_seed(rng.randrange(1 << 62))
        plan = []
        for (name, g), (_n, e) in zip(got_leaves, exp_leaves):
            if not isinstance(e, torch.Tensor):
                plan.append((None, None))
                if isinstance(g, (batch.Remote, torch.Tensor)) or not output_compare.compare(g, e, None) == []:
                    return ["%s: got %s, expected %r" % (name, type(g).__name__, e)]
                continue
            shape = getattr(g, "shape", None)
            if not isinstance(g, (batch.Remote, torch.Tensor)) or tuple(shape) != tuple(e.shape):
                return ["%s: got %s, expected a tensor of shape %s" % (
                    name, "shape %s" % list(shape) if shape is not None else type(g).__name__, list(e.shape))]
            dtype = g.dtype if isinstance(g, batch.Remote) else output_compare.dtype_name(g.dtype)
            if dtype != output_compare.dtype_name(e.dtype):
                return ["%s is %s, the reference's %s" % (name, dtype, output_compare.dtype_name(e.dtype))]
            positions = batch.draw_positions(1, e.numel(), generator)
            plan.append((e.numel(), positions.to(self.device) if positions is not None else None))
        reads = batch.reads_of([got_leaves], plan, self.mapped_memory())
        reads.ready()
        reads.launch()
        self.sync()
        found = reads.samples()
        tol = self.req["tolerance"]
        for j, ((name, _g), (_n, e)) in enumerate(zip(got_leaves, exp_leaves)):
            if plan[j][1] is None:
                continue
            got = found.get((0, j))
            if got is None:
                return ["%s could not be read" % name]
            exp = e.reshape(-1)[plan[j][1][0].to(e.device)]
            bad, first = batch.compare_samples(got.reshape(-1), exp.reshape(-1), tol)
            if bad:
                return ["%s: %d of %d sampled elements are wrong; first: got %s, expected %s" % (
                    name, bad, got.numel(), _fmt(first[1]), _fmt(first[2]))]
        return []

    # -- the judge's clock ---------------------------------------------------------------------
    def batch_size(self, kind, per_call_ms, reference_ms=None):
        """Calls in a batch of `kind`, sized by per_call_ms, capped by the reference's time per
        call: reference_ms() or, less, reference_ms (eager's own first batch, when sizing it again)."""
        in_bytes = self.set_bytes()
        out_bytes = sum(n * t.element_size() for _n, n, t in self.signature if n is not None)
        room = getattr(self, "room", None)
        reference = min((x for x in (self.reference_ms(), reference_ms) if x), default=None)
        return batch.calls_for(per_call_ms, 2 * in_bytes + out_bytes, self.device, reference,
                               target_ms=batch.target_ms(kind), held_bytes=room.held_bytes() if room is not None else 0)

    def run_batch(self, kind, per_call_ms):
        """The judge's clock over `kind` ("eager": the reference, in the candidate's process before
        its import; "candidate"), sized to about batch.target_ms(kind) by the time per call given (the
        claim, or the judge's reference call: any figure will do, as a wrong one only makes the
        batch longer, shorter or capped, and the judge's clock stays the only thing believed). The
        candidate's batch is checked, and timed again while the fastest would hold its claim down.
        Returns {"calls", "per_call_ms", "wall_ms", ...}."""
        n = self.batch_size(kind, per_call_ms)
        result = self.one_batch(kind, n)
        times = [result["per_call_ms"]]
        resized = self.batch_size(kind, result["per_call_ms"], result["per_call_ms"] if kind == "eager" else None)
        if result["per_call_ms"] * n < batch.target_ms(kind) / 2 and resized > n:
            # Sized by a figure that was too long (one reference call with its launch, a claim with
            # its flushes): the clock's fixed cost weighs on so short a batch. Again, sized by it.
            n = resized
            if kind == "candidate":
                self._kill(self.candidate_pid(), signal.SIGCONT)
            again = self.one_batch(kind, n)
            times.append(again["per_call_ms"])
            if kind != "candidate" or again["per_call_ms"] < result["per_call_ms"]:
                result = again
        if kind != "candidate":
            result["timed_batches"] = times
            return result
        while self.time_again(times, per_call_ms):
            self._kill(self.candidate_pid(), signal.SIGCONT)  # stopped after its last answer
            again = self.one_batch(kind, n, gate_ms=batch.gate_ms(result.get("candidate_says"), 1.0))
            times.append(again["per_call_ms"])
            if again["per_call_ms"] < result["per_call_ms"]:
                result = again
        result["timed_batches"] = times
        return result

    def eager_batch_ms(self):
        """Eager's batch per call on the judge's clock: anvil's cached figure, else this
        evaluation's (None before eager's batch has run)."""
        bound = self.req["timing"].get("bound") or {}
        return bound.get("eager_batch_per_call_ms") or ((self.report["timing"].get("eager") or {}).get(
            "batch") or {}).get("per_call_ms")

    def reference_ms(self):
        """The reference's time per call that sizes a batch (calls_for's MAX_SPEEDUP cap) and
        stands for eager's time until it is measured: the least of check_reference's one timed call
        and eager's batch per call. The one call is a single sample whose events also count a host
        stalled between them: on a loaded host it read up to 28 ms for a 0.024 ms reference, capped
        an 18 us candidate's batch at 18 calls, and the clock's fixed cost over so few calls doubled
        its time per call (bench/results/kb-batch-size-2026-11-29)."""
        return min((x for x in (self.ref_ms, self.eager_batch_ms()) if x), default=None)

    def time_again(self, times, claimed_ms):
        """Whether to time the candidate's batch once more: while the fastest of its timed batches
        (per call, `times`) would hold its claim down, up to batch.TIMED_BATCHES, unless the last two
        agree within batch.AGREE (a stall of the machine makes batches disagree; a time they agree on
        is the candidate's own)."""
        if len(times) >= batch.TIMED_BATCHES:
            return False
        if len(times) >= 2 and abs(times[-1] - times[-2]) <= batch.AGREE * min(times[-2:]):
            return False
        return self.holds_down(min(times), claimed_ms)

    def holds_down(self, batch_ms, claimed_ms):
        """Whether the candidate's batch, at batch_ms per call, would bound its claim (reward.h's
        rule, with the parameters anvil sent: eager's figures when its baselines are cached; else
        this evaluation's eager batch, for both). Only decides
        whether to time the batch again: anvil applies the rule to what it is sent."""
        bound = self.req["timing"].get("bound") or {}
        eager_batch = self.eager_batch_ms()
        # Not cached: eager's time is not measured yet; reference_ms is the closer guess.
        eager_ms = bound.get("eager_ms") or self.reference_ms()
        if not (eager_batch and eager_ms and claimed_ms and batch_ms):
            return False
        return batch_ms / eager_batch * eager_ms / (1.0 + float(bound.get("slack", 0.0))) > claimed_ms

    def one_batch(self, kind, n, gate_ms=batch.MAX_GATE_MS):
        """One batch of n calls of `kind` on fresh inputs drawn in secret: on a GPU timed by a
        batch.GpuClock (its gate held at most gate_ms for the calls to be enqueued), on the CPU by
        the judge's wall around the candidate's answer. The candidate's batch is checked."""
        torch = self.torch
        self.memory["batch_calls"] = max(self.memory["batch_calls"], n)
        cuda = self.device.type == "cuda"
        command = kind + "_batch" if kind == "eager" else "batch"
        with self.clock(kind + "_batch_inputs"):
            if self.lean:  # a seed per call: a float64 run deferred (precision_run) draws its call again
                seeds = [batch.secret_seed() for _ in range(n)]
                calls = [self.fresh_inputs(s, 1)[0] for s in seeds]
            else:
                seeds = None
                calls = self.fresh_inputs(batch.secret_seed(), n)  # these copies are never handed over
            skeletons, regions, total = batch.lay_out(calls)
            generator = torch.Generator().manual_seed(random.SystemRandom().randrange(1 << 62))
            plan = [(numel, batch.draw_positions(n, numel, generator).to(self.device) if numel else None)
                    for _name, numel, _t in self.signature]
            clock = None
            if cuda:  # the pool gets the inputs on the judge's clock, from the judge's staging copy or, lean, the draws
                self.room = self.room or batch.Room(self.device)
                if self.lean:  # no room for a staging copy: the draws themselves are the judge's pristine inputs
                    room = self.room_for(total, staging=False)
                    copies = batch.copies_into(room.pool.view, regions)
                else:
                    del calls
                    room = self.room_for(total)
                    calls, regions = batch.stage(skeletons, regions, room.staging[:total])
                    torch.cuda.empty_cache()  # the draws, staged: their blocks go back for the candidate's outputs
                    copies = [(room.pool.view[:total], room.staging[:total])]
                room.pool.view[:total].fill_(0xFF)
                self.flags = getattr(self, "flags", None) or batch.FlagWords(self.done_page)
                self.sync()
                clock, gate = self.flags.next()
                message = {"type": command, "handle": room.handle, "nbytes": room.pool.nbytes, "layout": skeletons,
                           "gate": gate}
            else:
                message = {"type": command}
        self.mapped = self.mapped or batch.Mapped()
        waited = evidence.RunQueue([os.getpid(), self.candidate_pid()])
        start = time.perf_counter()
        try:
            if clock is None:
                reply = self.ask(message, ("batch_done",), value=calls)
                outputs, answered = self.parse_outputs(reply, n, cuda), time.perf_counter()
                reads = self.prepare_reads(outputs, plan)
                reads.launch()
            else:  # the inputs go in once the calls are enqueued (or at the gate's deadline)
                # (the parts' clocks say where a batch's seconds go: bench/results/multi-gpu-2026-11-27)
                with self.clock(kind + "_batch_queued"):
                    queued = self.ask(message, ("queued",), deadline=start + gate_ms / 1e3)
                    if queued is None:  # open the gate anyway; the clock ends when the outputs are described
                        clock.open(copies)
                        queued = self.answer(("queued",), command)
                with self.clock(kind + "_batch_reads"):
                    outputs = self.parse_outputs(queued, n, cuda)
                    reads = self.prepare_reads(outputs, plan)  # before the clock: nothing here waits for the device
                if not clock.opened:
                    clock.open(copies)
                clock.close(reads)
                with self.clock(kind + "_batch_done"):
                    reply = self.answer(("batch_done",), command)
                answered = time.perf_counter()
                if kind == "candidate":
                    self._kill(self.candidate_pid(), signal.SIGSTOP)  # nothing more from its host side
                with self.clock(kind + "_batch_finish"):
                    clock.finish()
        except batch.BatchError as e:
            raise Hack("protocol", "the judge's batch: %s" % e)
        finally:
            if clock is not None and clock.closed and not clock.finished:
                # The done flag never came: nothing of the candidate's may write it while the judge
                # does, a process it started (which shares the page through its fork) included.
                self.end_candidate(wait=True, settle=True)
                try:
                    clock.release()
                except batch.BatchError as e:
                    from anvil.harness import CannotServe

                    raise CannotServe("the judge's batch: %s" % e)
        if clock is None:
            self.sync()
        wall_ms = (time.perf_counter() - start) * 1e3
        result = {"calls": n, "wall_ms": round(wall_ms, 6), "answer_ms": round((answered - start) * 1e3, 6),
                  "target_ms": batch.target_ms(kind), "candidate_says": reply.get("phases")}
        if clock is not None:  # any copy-in time beyond the judge's own copy rate is the candidate's (batch.CopyRate)
            excess = self.copy_rate.excess_ms(clock.copied_bytes, clock.copy_ms())
            result.update(per_call_ms=round(max(clock.ms() + excess, 1e-6) / n, 6), clock="gpu",
                          gpu_ms=round(clock.ms(), 6), gate_ms=round(clock.gate_ms(), 6),
                          copy_ms=round(clock.copy_ms(), 6), copy_excess_ms=round(excess, 6))
        else:
            result.update(per_call_ms=round(max(wall_ms, 1e-6) / n, 6), clock="wall")
        result.update(waited.load())  # the machine's load on both processes while the batch ran
        if kind == "candidate":
            with self.clock("batch_checks"):
                result["checked"] = self.check_batch(calls, outputs, reads.samples(), plan,
                                                     room.pool if cuda else None, regions, seeds)
        del calls, regions
        if cuda:
            del copies  # views of the draws
        if self.lean:
            self.free_cached()
        return result

    def parse_outputs(self, reply, n, cuda):
        """A batch's outputs as the candidate's process described them: on a GPU Remotes (or
        DenseOutputs) into its exported allocations, on the CPU the values themselves."""
        if reply.get("calls") != n:
            raise Hack("protocol", "the judge's batch of %d calls was answered for %r calls" % (n, reply.get("calls")))
        if not cuda:
            outputs = reply.get("value")
            if not isinstance(outputs, list) or len(outputs) != n:
                raise Hack("protocol", "the judge's batch of %d calls was answered with %s outputs" % (
                    n, len(outputs) if isinstance(outputs, list) else "no"))
            return outputs
        segments, dense, described = reply.get("segments"), reply.get("dense"), reply.get("outputs")
        if not isinstance(segments, list):
            raise batch.BatchError("no list of allocations")
        if dense is not None:
            return batch.DenseOutputs(dense, segments, n)
        if not isinstance(described, list) or len(described) != n:
            raise Hack("protocol", "the judge's batch of %d calls was answered with %s outputs" % (
                n, len(described) if isinstance(described, list) else "no"))
        return [batch.remote_outputs(o, segments) for o in described]

    def prepare_reads(self, outputs, plan):
        if isinstance(outputs, batch.DenseOutputs):
            reads = batch.reads_dense(outputs, plan, self.mapped)
        else:
            reads = batch.reads_of([list(leaves(v)) for v in outputs], plan, self.mapped)
        reads.ready()
        if self.device.type == "cuda":
            self.torch.cuda.current_stream().synchronize()  # the addresses are on the device
        return reads

    def check_batch(self, calls, outputs, found, plan, pool, regions, seeds=None):
        """The pool against the judge's copies (an input the candidate modified), then every call's
        sampled elements against the judge's reference for its inputs and FULL_CHECKS calls in full.
        The reference runs on the judge's pristine copies themselves (checked unchanged first)."""
        torch = self.torch
        n = len(calls)
        if pool is not None:
            for k, args in enumerate(calls):
                for (t, region) in regions_of(regions, args):
                    if output_compare.changed_elements(t, batch.region_tensor(pool.view, region)):
                        raise Outcome("wrong_answer", "call %d of the judge's batch: the candidate modified one of its "
                                      "inputs (inputs are read-only)" % k, reason="input_mutated")
        full = set(random.SystemRandom().sample(range(n), min(batch.FULL_CHECKS, n)))
        tol = self.req["tolerance"]
        got_rows, exp_rows, names = {}, {}, {}
        self.pin_flags()
        for k in range(n):
            # a call compared in full is also run in float64, on inputs the reference has not touched
            pristine = map_tensors(calls[k], lambda t: t.clone()) if k in full and not seeds else None
            expected = self.reference_on(calls[k], "the judge's batch, call %d" % k)
            exp_leaves = list(leaves(expected))
            flat_k = list(leaves(outputs[k])) if not isinstance(outputs, batch.DenseOutputs) else [
                ("output", outputs[k])]
            if len(exp_leaves) != len(flat_k):
                self.batch_mismatch(k, "its output has %d parts, the reference's %d" % (len(flat_k), len(exp_leaves)))
            for j, (name, exp) in enumerate(exp_leaves):
                if not isinstance(exp, torch.Tensor) or plan[j][1] is None:
                    continue
                got = found.get((k, j))
                if got is None or tuple(getattr(flat_k[j][1], "shape", ())) != tuple(exp.shape):
                    self.batch_mismatch(k, "%s has shape %s, the reference's %s" % (
                        name, list(getattr(flat_k[j][1], "shape", [])), list(exp.shape)))
                if getattr(flat_k[j][1], "dtype", None) not in (None, output_compare.dtype_name(exp.dtype), exp.dtype):
                    self.batch_mismatch(k, "%s is %s, the reference's %s" % (
                        name, flat_k[j][1].dtype, output_compare.dtype_name(exp.dtype)))
                got_rows.setdefault(j, []).append(got)
                exp_rows.setdefault(j, []).append(exp.reshape(-1)[plan[j][1][k].to(exp.device)])
                names[j] = name
            if k in full:  # compared in full, and against float64
                local = localize(outputs[k], self.mapped)
                lines = output_compare.compare(local, expected, tol)
                if lines:
                    self.batch_mismatch(k, lines[0])
                source = (lambda s=seeds[k]: self.fresh_inputs(s, 1)[0]) if seeds else (lambda a=pristine: a)
                self.check_precision(local, expected, "the judge's batch, call %d" % k, source)
                del local, pristine
            del expected
        for j, rows in got_rows.items():  # every call's samples of one output at once
            got, exp = torch.stack(rows), torch.stack(exp_rows[j])
            bad, first = batch.compare_samples(got.reshape(-1), exp.reshape(-1), tol)
            if bad:
                k = first[0] // got.shape[1]
                row_bad, row_first = batch.compare_samples(got[k], exp[k], tol)
                self.batch_mismatch(k, "%s: %d of %d sampled elements are wrong; first: got %s, expected %s" % (
                    names[j], row_bad, got.shape[1], _fmt(row_first[1]), _fmt(row_first[2])))
        return {"calls": n, "samples_per_output": batch.SAMPLES, "full": sorted(full)}

    def batch_mismatch(self, k, text):
        raise Hack("timed_output_mismatch", "call %d of the judge's timed batch (fresh inputs, drawn in secret) "
                   "returned a wrong output, though verification passed: %s. Outputs must be right for every input "
                   "and computed within the call" % (k, text))

    # -- eager and torch.compile ---------------------------------------------------------------
    def quiet_gpu(self, limit_s=3.0):
        """Wait (up to limit_s) until no other process holds a context on the GPU: the candidate's
        process and an earlier evaluation's, killed at its report, may still be tearing theirs
        down."""
        if self.device.type != "cuda":
            return
        deadline = time.perf_counter() + limit_s
        while time.perf_counter() < deadline and (self.other_gpu_processes() or 0) > 0:
            time.sleep(0.02)

    def other_gpu_processes(self):
        """Processes other than this one with a context on the GPU (NVML; None: it cannot tell),
        less the idle ones of measurements parked on this GPU's lock (timing.parked_contexts)
        where they can be theirs (evidence.others_beside). A baseline measured while another
        process used the GPU is not kept. defenses.gpu_processes_seen: how NVML numbered them."""
        pids = evidence.gpu_process_pids(self.device)
        if pids is None:
            return None
        parked = timing.parked_contexts(self.req["gpu_lock"]) if self.req.get("gpu_lock") is not None else 0
        others, seen = evidence.others_beside(pids, os.getpid(), {self.supervisor, self.cand_pid} - {None}, parked)
        self.report["defenses"]["gpu_processes_seen"] = seen
        return others

    def time_models(self):
        """eager and torch.compile, as the candidate claimed its time (fresh inputs per call; profiled
        for a kernel sum when the request's baseline_kernel_sum asks), once the GPU is quiet."""
        t = self.req["timing"]
        if any(m != "candidate" for m in t["measure"]):
            with self.clock("quiet_gpu"):
                self.quiet_gpu()
        results = self.report["timing"]
        for name in t["measure"]:
            if name == "candidate":
                continue
            self.stage = "timing"
            if name == "compile":
                with self.clock("compile"):
                    results["compile"] = self.time_compile()
                continue
            try:
                with self.clock("eager"):
                    results["eager"] = dict(self.time_one(self.ref, t["warmup"], name="eager"), **results.get("eager", {}))
            except Outcome:
                raise
            except BaseException as e:  # noqa: BLE001
                raise Outcome("task_error", "while timing: %s" % raised(e, "the reference Model"), trace(e))

    def time_one(self, fn, warmup, name, first_call=None):
        """One baseline, with what the machine was doing meanwhile: how long the judge's threads
        waited for a CPU from the end of the warm-up (torch.compile compiles in it) to the end,
        whether the candidate's processes were gone, other processes on the GPU. name: the clock's
        prefix for the measurement's phases (name_warmup, name_probe, name_timed, name_inspected:
        from each phase's first call to the next phase's); first_call: the clock's name for the first
        call's seconds (torch.compile's compilation)."""
        t = self.req["timing"]
        self.pin_flags()
        cuda = self.device.type == "cuda"
        before = self.other_gpu_processes() if cuda else None
        waited = [evidence.RunQueue([os.getpid()])]
        warmed = [0]
        began = time.perf_counter()

        current = ["warmup", began]

        def observe(phase, _k, _out, _sample_ms):  # outside any timed region
            if phase != current[0]:
                now = time.perf_counter()
                self.clock["%s_%s" % (name, current[0])] = round(now - current[1], 4)
                current[:] = [phase, now]
            if phase == "warmup":
                warmed[0] += 1
                if warmed[0] == 1 and first_call:
                    self.clock[first_call] = round(time.perf_counter() - began, 4)
                if warmed[0] == warmup:
                    waited[0] = evidence.RunQueue([os.getpid()])

        with self.torch.no_grad():
            result = timing.measure(fn, self.call_inputs, self.device, warmup=warmup, calls=t["calls"],
                                    flush_l2=bool(t["flush_l2"]), kernel_sum=bool(t["baseline_kernel_sum"]),
                                    hide_launch=bool(t.get("hide_launch", True)), observe=observe)
        self.clock["%s_%s" % (name, current[0])] = round(time.perf_counter() - current[1], 4)
        result["load"] = dict(waited[0].load(), candidate_gone=self.candidate_gone)
        if cuda:
            after = self.other_gpu_processes()
            seen = [n for n in (before, after) if n is not None]
            result["load"]["other_gpu_processes"] = max(seen) if seen else None
        return result

    def time_compile(self):
        """torch.compile(ref) timed like the others, compiled during warm-up (or before, by
        prepare_together); {"error"} if it fails."""
        mode = self.req["timing"]["compile_mode"]
        try:
            if isinstance(self.compiled_ref, BaseException):
                raise self.compiled_ref
            fn = self.compiled_ref if self.compiled_ref is not None else timing.compiled(self.torch, self.ref, mode)
            return self.time_one(fn, max(1, self.req["timing"]["warmup"]), name="compile",
                                 first_call="compile_first_call")
        except BaseException as e:  # noqa: BLE001 - a baseline that does not compile is reported
            if isinstance(e, KeyboardInterrupt):
                raise
            return {"error": raised(e, "torch.compile(Model%s)" % ("" if mode == "default" else ", mode=%r" % mode))}

    # -- the baselines prepared beside others, timed alone ------------------------------------------
    def together(self):
        """The baselines prepared beside other measurements (the request's prepare "together",
        `anvil baselines`' default on a GPU): the lock shared until prepare_together has parked.
        A lean task (a set of inputs of a GiB or more) only with room in the wave (wave_room);
        else it prepares alone, its memory beside a wave of others' is what would run the GPU out."""
        return self.req.get("gpu_lock") is not None and self.req.get("prepare") == "together" and \
            (not self.lean or self.wave_room() is not None)

    def wave_room(self):
        """(need_bytes, capacity_bytes) of a lean measurement of baselines (no candidate) prepared in
        a wave. It reserves WAVE_SETS times its set of inputs, or, where more, the warm-up's
        measured peak of both models (the request's warm_peak_bytes: a set, eager's and the
        compiled model's calls with their working memory) and two sets more (the judge keeps the
        reference's output and draws the timed calls' sets), and WAVE_SLACK besides. The lean
        ones of a wave together keep within WAVE_SHARE of the GPU's memory (the request's
        gpu_bytes, from anvil's probe), the rest left to the wave's small ones (a set under
        lean_bytes each) and the contexts. None when it is not such a measurement, the GPU's size
        is not known, or its need alone exceeds the share. A wave that runs out all the same fails
        as memory_limited (memory_fault), and `anvil baselines` measures it again alone."""
        gpu_bytes = self.req.get("gpu_bytes")
        if not self.lean or self.req["candidate_kind"] != "none" or not gpu_bytes or self.input_bytes is None:
            return None
        need = max(WAVE_SETS * self.input_bytes, (self.req.get("warm_peak_bytes") or 0) + 2 * self.input_bytes)
        need, capacity = need + WAVE_SLACK, int(WAVE_SHARE * gpu_bytes)
        return (need, capacity) if need <= capacity else None

    def prepare_together(self):
        """What comes before the timed work and times nothing, done while other measurements
        prepare too (the GPU's lock shared): CUDA's start in both processes, the model placed, the
        inputs drawn and the reference's first call (set_up), and torch.compile's compilation and
        first call. Then everything queued is done, and the lock is taken exclusive
        (timing.GpuLock.park): from there on, what this process times is alone at work on the GPU
        (the parked measurements' contexts idle beside it are counted out of the evidence of
        other processes: timing.parked_contexts)."""
        t = self.req["timing"]
        if "compile" in t["measure"]:
            with self.clock("compile_prepare"):
                try:
                    fn = timing.compiled(self.torch, self.ref, t["compile_mode"])
                    with self.torch.no_grad():
                        fn(*self.call_inputs(0))
                    self.compiled_ref = fn
                except BaseException as e:  # noqa: BLE001 - reported as the compile baseline's error
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    if memory_error(e, self.torch) is not None:  # beside the wave's memory: compiled
                        self.compiled_ref = None  # again by time_compile, the GPU then its own
                        self.free_cached()
                    else:
                        self.compiled_ref = e
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
            inputs = self.report["defenses"]["inputs"]  # what it held beside its wave, and holds parked
            inputs["prepare_peak_bytes"] = max(self.memory.get("set_up_peak_bytes", 0),
                                               int(self.torch.cuda.max_memory_allocated(self.device)))
            self.free_cached()  # what it no longer holds is the others' while it waits
            inputs["parked_bytes"] = int(self.torch.cuda.memory_allocated(self.device))
        with self.clock("parked"):
            self.gpu_lock.park(contexts=1 if self.candidate_gone else 2)
        self.clock.mark("gpu_alone")

    def after_import(self, o):
        """An Outcome raised once candidate code exists: a task_error then is no longer the task's
        (probe_task ran all of it before, without the candidate), but what the candidate's code did
        to the judge's work (its context, its memory, its files): runtime_error. Any other stands."""
        if o.outcome != "task_error" or not self.imported:
            return o
        return Outcome("runtime_error", "after the candidate's code was imported, the judge's own work failed where it "
                       "had run before without it: %s" % o.message, o.detail)

    # -- the verdict ---------------------------------------------------------------------------
    def findings(self):
        """Every hack reason the evidence supports, as (reason, message, evidence)."""
        from anvil import findings

        return findings.collect(self)

    def hack_outcome(self, found):
        order = {r: i for i, r in enumerate(REASONS)}
        found = sorted(found, key=lambda f: order.get(f[0], len(REASONS)))
        reason, message, evidence_ = found[0]
        self.report["hack"] = {"reason": reason, "reasons": [{"reason": r, "message": m} for r, m, _ in found],
                               "evidence": evidence_}
        return Outcome("hack_suspected", message, "\n".join("%s: %s" % (r, m) for r, m, _ in found), reason=reason)

    def static_findings(self):
        try:
            from anvil import static_check
        except ImportError:
            return
        try:
            self.report["defenses"]["static"] = static_check.scan(self.req["candidate_dir"])[:50]
        except Exception as e:  # noqa: BLE001 - evidence only
            self.report["defenses"]["static"] = [{"kind": "error", "why": str(e)[:200]}]

    # -- all of it ------------------------------------------------------------------------------
    def set_up(self, started):
        import torch

        with self.clock("fork"):
            self.fork_candidate()
        with self.clock("setup"):
            self.torch = torch
            self.load_task()
            self.plan_inputs()
            # The trials' seeds drawn in secret, after the fork (the candidate's process has none of this
            # process's later memory): it learns the base from the plan and forgets it once it has drawn
            # every set it uses (not lean: Harness.forget_seeds), so it cannot draw a trial again to
            # tell the trials from the stress sets among them (blind_sets)
            self.trial_base = random.SystemRandom().randrange(1 << 40)
            self.shared.send_plan(self.plan())  # the candidate's process adopts it
            self.report["defenses"]["inputs"] = {"set_bytes": self.input_bytes, "lean": self.lean}
            # Split (the trials drawn on the host, half in each process): this side's half is drawn
            # while CUDA starts (the draws use the host, the start of CUDA the driver); the reference
            # is built once they are done (both use torch's global random numbers, each after its own
            # seed). Drawn by each process (draws_each) or lean: nothing ahead, each process draws
            # once its device is up.
            host_draws = not self.lean and not self.draws_each
            locked = self.req.get("gpu_lock") is not None
            if locked:  # the host's work first, then the GPU, once no other measurement holds it
                if host_draws:
                    self.shared.draw_mine(self)
                self.construct_reference()
                with self.clock("gpu_lock"):  # together: shared while it prepares (prepare_together)
                    together = self.together()
                    room = self.wave_room() if together else None
                    self.gpu_lock = timing.GpuLock(self.req["gpu_lock"], together=together, room=room)
                    if room is not None:
                        self.report["defenses"]["inputs"]["wave_bytes"] = room[0]
                        self.report["defenses"]["inputs"]["warm_peak_bytes"] = self.req.get("warm_peak_bytes")
                self.clock.mark("gpu_lock")
            drawer = _Drawer(self.shared, self) if self.req["device"].startswith("cuda") and host_draws and not locked \
                else None
            with self.clock("cuda_start"):
                self.setup()
                if self.device.type == "cuda":  # the judge's own context (and whatever else holds the GPU)
                    free, total = torch.cuda.mem_get_info(self.device)
                    self.memory["context_bytes"] = total - free
            self.shared.device_ready()  # the candidate's process starts its own CUDA context now
            if drawer is not None:
                drawer.join()
            if locked:
                with self.clock("place_reference"):
                    self.place_reference()
            else:
                self.build_reference()
        self.clock.mark("set_up")
        if self.req["candidate_kind"] != "none":
            with self.clock("static"):
                self.static_findings()
        with self.clock("reference"):  # while the candidate's process sets itself up
            with self.clock("inputs"):
                if drawer is not None or (locked and host_draws):  # drawn ahead: sent now (after device_ready)
                    self.shared.send_mine()
                if self.draws_each:  # every set, in order, as the candidate's process draws them
                    mine = [trial_digest(self.trial_inputs(i)) for i in range(self.drawn_sets())]
                for i in [] if self.lean or self.draws_each else self.shared.mine():  # split: sent as made
                    self.trial_inputs(i)
            with self.clock("check_reference"):
                if self.device.type == "cuda":
                    self.memory["set_up_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
                    torch.cuda.reset_peak_memory_stats(self.device)
                    held = torch.cuda.memory_allocated(self.device)
                self.memory["output_bytes"] = tensor_bytes(self.expected_for(0))
                if self.device.type == "cuda":  # the reference's working memory beyond what it was given
                    self.memory["reference_work_bytes"] = torch.cuda.max_memory_allocated(self.device) - held
        inputs = self.report["defenses"]["inputs"]
        inputs["draws"] = "lean" if self.lean else "each" if self.draws_each else "split"
        inputs["on_device"] = bool(self.device_inputs) and (self.lean or self.draws_each)
        if self.draws_each:  # the candidate's process drew alike, or takes the judge's draws
            with self.clock("settle_draws"):
                try:
                    inputs["drawn_again"] = self.shared.settle_draws(self, mine)
                except ValueError as e:
                    raise Outcome("task_error", str(e))
        self.hello()
        self.report["seconds"]["import"] = time.perf_counter() - started

    def run(self, started):
        seconds = self.report["seconds"]
        measure = self.req["timing"]["measure"]
        # seconds: "verify" the candidate's load and trials; "timing" every measurement (the eager
        # batch, the candidate's timed calls and batch, the baselines), whatever order they ran in
        phase = {"name": "timing", "since": None}

        def enter(name):
            now = time.perf_counter()
            if phase["since"] is not None:
                seconds[phase["name"]] = seconds.get(phase["name"], 0.0) + now - phase["since"]
            phase.update(name=name, since=None if name is None else now)

        try:
            self.set_up(started)
            enter("timing")
            if self.together():
                self.prepare_together()
            try:
                if self.device.type == "cuda" and any(m in measure for m in ("eager", "candidate")):
                    with self.clock("clock_ready"):  # the candidate's process is idle, none of its code exists yet
                        self.copy_rate = batch.CopyRate(self.device)
                        try:
                            batch.require_gather()
                        except batch.BatchError as e:
                            from anvil.harness import CannotServe

                            raise CannotServe("the judge's clock cannot read a batch's outputs here: %s" % e)
                if "eager" in measure:
                    with self.clock("eager_batch"):
                        self.report["timing"]["eager"] = {"batch": self.run_batch("eager", self.ref_ms)}
                    self.note_memory("eager batch")
                if self.req["candidate_kind"] != "none":  # else the baselines alone: nothing imported
                    enter("verify")
                    with self.clock("probe_task"):
                        self.probe_task()
                    self.load()
                    self.verify()
                    enter("timing")
                if "candidate" in measure:
                    with self.clock("before_timing"):
                        self.peaks()
                    claim = self.claimed_timing()
                    with self.clock("candidate_batch"):
                        field = (self.req["timing"].get("bound") or {}).get("claim") or "median_ms"
                        per_call = claim.get(field) or claim.get("median_ms") or claim.get("kernel_sum_ms")
                        claim["batch"] = self.run_batch("candidate", per_call)
                    self.report["timing"]["candidate"] = claim
            except Hack as h:
                self.report["timing"] = {}
                raise self.hack_outcome([(h.reason, h.message, h.evidence)])
            except Outcome as o:
                raise self.after_import(o)
            except Exception as e:  # noqa: BLE001 - only the GPU's memory running out is decided here
                self.own_memory_fault(e)
                raise
            finally:
                enter(None)
            with self.clock("end_child"):
                if self.mapped is not None:
                    self.mapped.close()
                left = self.kill_leftovers()
                # baselines next: the GPU and the CPU must be quiet
                self.end_candidate(wait=True, settle=any(m != "candidate" for m in measure))
                if self.room is not None and self.candidate_gone:  # no process maps the pool any more
                    self.room.free()
                    self.room = None
                    self.free_cached()
            if left:
                self.report["timing"] = {}
                raise self.hack_outcome([("threads", "the candidate left %d process(es) running after its process "
                                          "ended: candidate code may not start processes" % left,
                                          {"processes": left})])
            self.finish_precision()
            enter("timing")
            with self.clock("baselines"):
                try:
                    self.time_models()
                except Outcome as o:
                    raise self.after_import(o)
            enter(None)
            if self.device.type == "cuda":  # the judge's most at once (a wave's room: wave_room)
                self.report["defenses"]["inputs"]["peak_bytes"] = max(
                    self.memory.get("set_up_peak_bytes", 0), int(self.torch.cuda.max_memory_allocated(self.device)))
            self.report["defenses"]["precision"] = self.precision
            self.report["defenses"]["precision_checks"] = self.precision_checks[:16]
            found = self.findings() if self.req["candidate_kind"] != "none" else None
            if found:
                self.report["timing"] = {}
                raise self.hack_outcome(found)
        finally:  # killed, not waited for: the report need not wait for a CUDA context's teardown, and the
            # judge is PID 1 of the evaluation's namespace, so nothing outlives it. Holding the GPU's
            # lock, waited for: the lock goes with this process's descriptors, before the kernel ends
            # the rest of its namespace, and the next holder must not time beside a candidate (or the
            # kernels it left queued) still alive.
            self.clock.mark("end")
            locked = self.gpu_lock is not None
            self.kill_leftovers(reap=False)
            self.end_candidate(wait=locked, settle=locked)
            self.kill_leftovers(reap=False)


class _Drawer:
    """SharedInputs.draw_mine in a thread of its own (torch's host ops let go of the GIL); join()
    raises what it raised."""

    def __init__(self, shared, harness):
        import threading

        self.error = None

        def draw():
            try:
                shared.draw_mine(harness)
            except BaseException as e:  # noqa: BLE001 - raised again by join()
                self.error = e

        self.thread = threading.Thread(target=draw, name="anvil-draws", daemon=True)
        self.thread.start()

    def join(self):
        self.thread.join()
        if self.error is not None:
            raise self.error


def _fmt(x):
    return output_compare.fmt_num(x) if isinstance(x, (int, float)) else str(x)


def localize(value, mapped, depth=0):
    """A value with every batch.Remote replaced by a local copy of the tensor it names."""
    if isinstance(value, batch.Remote):
        try:
            return mapped.tensor(value).clone()
        except batch.BatchError as e:
            raise Hack("protocol", "the judge's batch: %s" % e)
    if depth < 32 and isinstance(value, (list, tuple)):
        items = [localize(v, mapped, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if depth < 32 and isinstance(value, dict):
        return {k: localize(v, mapped, depth + 1) for k, v in value.items()}
    return value


def regions_of(regions, args):
    """(input tensor, its pool region) for the tensors of one call's arguments."""
    ids = {id(t) for _n, t in leaves(args)}
    return [(t, r) for t, r in regions if id(t) in ids]
