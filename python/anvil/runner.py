"""The evaluation runner: verify and time one candidate against its task (protocol anvil.runner/1).

docs/runner-protocol.md is the contract; this is its Python side. anvil starts it as PID 1 of a PID
namespace of its own (python -I, the candidate's directory nowhere on sys.path), writes one JSON
request on stdin and reads one JSON report from file descriptor 3 (when fd 3 is not open, as in a
manual run, the report is the last line of stdout). Whatever the task or the candidate does, the
runner writes exactly one report and exits 0; only a process that dies writes none. A malformed
request, or a device that is not there, gives status "error" and exit status 2: anvil, not the
candidate, is at fault then.

With defenses on (the default) the runner becomes the judge (anvil.judge) and candidate code runs
only in a confined process of its own. With defenses off (`--no-defenses`, to measure what they
cost) the candidate runs here, unconfined: Evaluation below. The reward is decided by anvil, from
the report, never here.

Defaults for fields a request leaves out are those of the protocol's example request (strict
tolerances, flags off, 5 trials, timing of candidate, eager and compile).
"""
import base64
import json
import os
import sys
import time

from anvil import output_compare, share, timing
from anvil._cli import ReportChannel, exit_after, tail
from anvil.harness import (DETAIL_LINES, LEAN_BYTES, PROTOCOL, SEEDED_HINT, CannotServe, Harness, Outcome,
                           RequestError, candidate_failed, map_tensors, raised, tensor_pairs, trace, what)

MEASURABLE = ("candidate", "eager", "compile")
# "none": the baselines alone (eager, torch.compile), no candidate imported (anvil baselines)
CANDIDATE_KINDS = ("workdir", "file", "none")
FLAGS = {"allow_tf32": False, "cudnn_allow_tf32": False, "cudnn_benchmark": False,
         "cudnn_deterministic": False}
# The timing's defaults beyond share/protocol.json's (warmup, calls, input_sets: share.timing()).
TIMING = {"measure": ["candidate", "eager", "compile"],
          "flush_l2": True, "kernel_sum": True, "baseline_kernel_sum": True, "compile_mode": "default",
          "hide_launch": True, "lean_bytes": LEAN_BYTES}
WEIGHTS = ("by_name", "by_name_or_seed")
DEFENSES = {"enabled": True, "policy": None, "allow_lower_precision": False, "roofline": {},
            "roofline_slack": 1.25, "precision_ratio": 16.0, "cuobjdump": None}


# ---------------------------------------------------------------------------------------------
# Request and report

def parse_request(text):
    """The request with defaults filled in; raises RequestError."""
    try:
        request = json.loads(text)
    except ValueError as e:
        raise RequestError("the request is not JSON: %s" % e)
    if not isinstance(request, dict):
        raise RequestError("the request is not a JSON object")
    if request.get("protocol") != PROTOCOL:
        raise RequestError("protocol %r, expected %r" % (request.get("protocol"), PROTOCOL))
    for key in ("task_file", "candidate_dir"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise RequestError("%s: a non-empty string is required" % key)
    if not os.path.isdir(request["candidate_dir"]):
        raise RequestError("candidate_dir %s is not a directory" % request["candidate_dir"])
    out = dict(request)
    out.setdefault("candidate_kind", "workdir")
    out.setdefault("device", "cuda")
    out.setdefault("seed", 0)
    out.setdefault("trials", 5)
    out["tolerance"] = request.get("tolerance") if request.get("tolerance") is not None else share.default_tolerance()
    out["flags"] = dict(FLAGS, **(request.get("flags") or {}))
    out["rules"] = dict(share.rules(), **(request.get("rules") or {}))
    if out["rules"]["weights"] not in WEIGHTS:
        raise RequestError("rules.weights %r, expected one of %s" % (out["rules"]["weights"], ", ".join(WEIGHTS)))
    out["timing"] = dict(share.timing(), **TIMING)
    out["timing"].update(request.get("timing") or {})
    defenses = request.get("defenses")
    if defenses is False:
        defenses = {"enabled": False}
    if not isinstance(defenses or {}, dict):
        raise RequestError("defenses: an object or false is required")
    out["defenses"] = dict(DEFENSES, **(defenses or {}))
    if out["defenses"]["policy"] is None:
        from anvil import policy

        out["defenses"]["policy"] = dict(policy.DEFAULT_POLICY)
    elif not isinstance(out["defenses"]["policy"], dict) or not isinstance(
            out["defenses"]["policy"].get("allowed_ops", []), list):
        raise RequestError("defenses.policy: an object with a list allowed_ops is required")
    else:
        from anvil import policy

        out["defenses"]["policy"] = dict(policy.DEFAULT_POLICY, **out["defenses"]["policy"])
    if out["candidate_kind"] not in CANDIDATE_KINDS:
        raise RequestError("candidate_kind %r, expected one of %s" % (out["candidate_kind"], ", ".join(CANDIDATE_KINDS)))
    if out.get("gpu_lock") is not None and not isinstance(out["gpu_lock"], str):
        raise RequestError("gpu_lock: a path")
    if out.get("prepare", "alone") not in ("alone", "together") or (
            out.get("prepare", "alone") == "together" and out.get("gpu_lock") is None):
        raise RequestError("prepare: \"alone\" or \"together\", and \"together\" only with gpu_lock")
    for key in ("gpu_bytes", "warm_peak_bytes"):
        if out.get(key) is not None:
            _check_int(out, key, 0)
    if out["candidate_kind"] == "none" and "candidate" in (out["timing"].get("measure") or []):
        raise RequestError("timing.measure: candidate_kind \"none\" has no candidate to time")
    if not isinstance(out["device"], str):
        raise RequestError("device: a string is required")
    sf = out.get("syscall_filter")
    if sf is not None:
        try:
            program = base64.b64decode(sf, validate=True) if isinstance(sf, str) else b""
        except ValueError:
            program = b""
        if not program or len(program) % 8 or len(program) > 8 * 4096:
            raise RequestError("syscall_filter: a classic BPF program (8-byte instructions, at most 4096) in base64")
    _check_int(out, "seed", None)
    _check_int(out, "trials", 1)
    if not isinstance(out["tolerance"], dict):
        raise RequestError("tolerance: an object is required")
    for name, entry in out["tolerance"].items():
        if name != "preset" and not (isinstance(entry, dict) and all(
                isinstance(entry.get(k, 0), (int, float)) or (k == "norm" and entry.get(k) is None)
                for k in ("atol", "rtol", "norm"))):
            raise RequestError("tolerance.%s: {atol, rtol, norm} numbers are required" % name)
    t = out["timing"]
    if not isinstance(t["measure"], list) or any(m not in MEASURABLE for m in t["measure"]):
        raise RequestError("timing.measure: a list of %s is required" % ", ".join(MEASURABLE))
    _check_int(t, "warmup", 0, "timing.")
    _check_int(t, "calls", 1, "timing.")
    _check_int(t, "input_sets", 1, "timing.")
    _check_int(t, "lean_bytes", 0, "timing.")
    if not isinstance(t["compile_mode"], str):
        raise RequestError("timing.compile_mode: a string is required")
    if t.get("draws") not in (None, "each", "split"):
        raise RequestError("timing.draws: each or split")
    return out


def _check_int(obj, key, minimum, prefix=""):
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise RequestError("%s%s: an integer%s is required" % (
            prefix, key, "" if minimum is None else " >= %d" % minimum))


def new_report():
    return {
        "protocol": PROTOCOL,
        "status": "done",
        "outcome": None,
        "reason": None,
        "message": "",
        "detail": "",
        "verify": {"trials": [], "passed": 0, "failed": 0},
        "timing": {},
        "env": {"torch": None, "cuda": None, "device_name": None, "capability": None, "driver": None},
        "seconds": {"import": 0.0, "verify": 0.0, "timing": 0.0},
    }


# ---------------------------------------------------------------------------------------------
# The undefended evaluation

class Evaluation(Harness):
    """One request's evaluation, candidate code in this process; fills `report` as it goes and
    raises Outcome to stop."""

    def __init__(self, request, report):
        super().__init__(request, report["env"])
        self.report = report

    def call_reference(self, pristine, where):
        self.pin_flags()
        args = map_tensors(pristine, lambda t: t.clone())
        try:
            with self.torch.no_grad():
                out = self.ref(*args)
            self.sync()
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", "%s: %s" % (where, raised(e, "the reference Model")), trace(e))
        return out

    def call_candidate(self, pristine, where):
        """The candidate's output on clones of `pristine`, after checking it left them untouched."""
        args = map_tensors(pristine, lambda t: t.clone())
        try:
            with self.torch.no_grad():
                out = self.new(*args)
            self.sync()
        except BaseException as e:  # noqa: BLE001 - the candidate's failure is the answer
            raise candidate_failed(where, e, self.torch)
        for name, before, after in tensor_pairs(pristine, args, "input"):
            if not isinstance(after, self.torch.Tensor):
                continue
            changed = output_compare.changed_elements(before, after)
            if changed:
                raise _Mismatch("%s: the candidate modified %s (%d of %d elements changed)"
                                % (where, name, changed, before.numel()))
        return out

    # -- verification -----------------------------------------------------------------------
    def check_reference(self, pristine, seed):
        where = "reference check (seed %d)" % seed
        first = self.call_reference(pristine, where)
        bad = output_compare.nonfinite(first)
        if bad:
            raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        second = self.call_reference(pristine, where)
        lines = output_compare.compare(second, first, self.req["tolerance"])
        if lines:
            raise Outcome("task_error", "the reference is non-deterministic: two runs on the inputs of "
                          "seed %d differ: %s" % (seed, "\n".join(lines)))
        return first, second

    def verify(self):
        self.stage = "verify"
        verify = self.report["verify"]
        seed0 = self.req["seed"] + 1
        pristine = self.trial_inputs(0)
        # Keep the reference check's outputs alive through trial 0, so that a candidate returning
        # uninitialized memory cannot be handed the freed buffer of a correct answer.
        keep = self.check_reference(pristine, seed0)
        failures = []
        for i in range(self.req["trials"]):
            seed = seed0 + i
            if i > 0:
                keep = None
                pristine = self.trial_inputs(i)
            entry = {"seed": seed, "ok": True, "report": ""}
            verify["trials"].append(entry)
            try:
                self.trial(i, seed, pristine)
            except _Mismatch as m:
                entry.update(ok=False, report=str(m))
                failures.append(str(m))
            except Outcome as o:
                entry.update(ok=False, report=o.message)
                verify["failed"] += 1
                if o.outcome == "runtime_error" and failures:
                    raise Outcome("wrong_answer", failures[0], "\n".join(failures))
                raise
            verify["passed" if entry["ok"] else "failed"] += 1
        del keep
        if failures:
            detail = "\n".join(failures)
            raise Outcome("wrong_answer", failures[0] + (SEEDED_HINT if self.weights_note else ""),
                          tail(detail, DETAIL_LINES))

    def trial(self, i, seed, pristine):
        prefix = "trial %d (seed %d)" % (i, seed)
        first = self.call_candidate(pristine, prefix)
        # A snapshot: a later call may legitimately reuse (and overwrite) the returned buffers.
        first = map_tensors(first, lambda t: t.detach().clone())
        expected = self.call_reference(pristine, prefix)
        bad = output_compare.nonfinite(expected)
        if bad:
            raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        second = self.call_candidate(pristine, prefix + ", second call (after the reference)")
        tol = self.req["tolerance"]
        for label, got in ((prefix, first), (prefix + ", second call (after the reference)", second)):
            lines = output_compare.compare(got, expected, tol)
            if lines:
                raise _Mismatch("%s, %s" % (label, "\n".join(lines)))

    # -- timing -----------------------------------------------------------------------------
    def time_models(self):
        t = self.req["timing"]
        if not t["measure"]:
            return
        self.stage = "timing"
        sets = self.timing_sets()
        results = self.report["timing"]
        for name in t["measure"]:
            if name == "compile":
                results["compile"] = self.time_compile(sets)
                continue
            model = self.new if name == "candidate" else self.ref
            try:
                results[name] = self.time_one(model, sets, t["warmup"], baseline=name != "candidate")
            except BaseException as e:  # noqa: BLE001
                if name == "candidate":
                    raise candidate_failed("while timing", e, self.torch)
                raise Outcome("task_error", "while timing: %s" % raised(e, "the reference Model"), trace(e))

    def time_one(self, fn, sets, warmup, baseline):
        t = self.req["timing"]
        self.pin_flags()
        with self.torch.no_grad():
            return timing.measure(fn, sets, self.device, warmup=warmup, calls=t["calls"], flush_l2=bool(t["flush_l2"]),
                                  kernel_sum=bool(t["baseline_kernel_sum" if baseline else "kernel_sum"]),
                                  hide_launch=bool(t.get("hide_launch", True)))

    def time_compile(self, sets):
        """torch.compile(ref) timed like the others, compiled during warm-up; {"error"} if it fails."""
        mode = self.req["timing"]["compile_mode"]
        try:
            return self.time_one(timing.compiled(self.torch, self.ref, mode), sets, max(1, self.req["timing"]["warmup"]),
                                 baseline=True)
        except BaseException as e:  # noqa: BLE001 - a baseline that does not compile is reported
            if isinstance(e, KeyboardInterrupt):
                raise
            return {"error": raised(e, "torch.compile(Model%s)" % ("" if mode == "default" else ", mode=%r" % mode))}

    # -- all of it --------------------------------------------------------------------------
    def run(self, started):
        seconds = self.report["seconds"]
        if self.req.get("gpu_lock") is not None:  # the host's work first, then the GPU alone (timing.GpuLock)
            import torch

            self.torch = torch
            self.load_task()
            self.construct_reference()
            self.gpu_lock = timing.GpuLock(self.req["gpu_lock"])
            self.setup()
            self.place_reference()
        else:
            self.setup()
            self.load_task()
            self.build_reference()
        if self.req["candidate_kind"] != "none":
            self.import_candidate()
            self.build_candidate(self.ref.state_dict())
            if self.weights_note:
                self.report["verify"]["weights"] = self.weights_note
        seconds["import"] = time.perf_counter() - started
        mark = time.perf_counter()
        try:
            if self.req["candidate_kind"] != "none":
                self.verify()
        finally:
            seconds["verify"] = time.perf_counter() - mark
        mark = time.perf_counter()
        try:
            self.time_models()
        finally:
            seconds["timing"] = time.perf_counter() - mark


class _Mismatch(Exception):
    """A wrong answer in one trial (the trials go on; the first report becomes the message)."""


# Unexpected failures of the runner itself, by the stage they happened in. "candidate" is the judge's
# stage from the candidate's import on (judge.Judge.load): whatever breaks there broke handling what
# the candidate's process sent or did, the candidate's -1, never the task's nor "could not evaluate".
_STAGE_OUTCOME = {"task": "task_error", "load": "load_error", "verify": "runtime_error",
                  "timing": "runtime_error", "candidate": "runtime_error"}


def evaluate(request_text, report, started):
    """Run the evaluation of `request_text` into `report`; return the exit status."""
    evaluation = None
    try:
        request = parse_request(request_text)
        if request["defenses"]["enabled"]:
            from anvil.judge import Judge

            evaluation = Judge(request, report)
        else:
            evaluation = Evaluation(request, report)
        evaluation.run(started)
    except CannotServe as e:
        report.update(status="error", message=str(e))
        if e.memory_limited:
            report["memory_limited"] = True
        return 2
    except RequestError as e:
        report.update(status="error", message="bad request: %s" % e)
        return 2
    except Outcome as o:
        report.update(outcome=o.outcome, message=o.message, detail=o.detail, reason=o.reason)
    except BaseException as e:  # noqa: BLE001 - a report even when the runner itself breaks
        stage = evaluation.stage if evaluation is not None else "setup"
        if stage not in _STAGE_OUTCOME:
            report.update(status="error", message="the runner failed during %s: %s" % (stage, what(e)),
                          detail=trace(e))
            return 2
        report.update(outcome=_STAGE_OUTCOME[stage], message="the runner failed during %s: %s" % (stage, what(e)),
                      detail=trace(e))
    return 0


def main():
    started = time.perf_counter()
    timing.Clock.origin = started
    if os.getpid() == 1:  # PID 1 of the namespace anvil made: see its own processes in /proc
        from anvil import confine

        confine.own_proc()
    import faulthandler

    faulthandler.enable(all_threads=True)  # a crash (the undefended candidate's, in this process) leaves its stack
    channel = ReportChannel(PROTOCOL)  # its descriptors closed by the candidate's process (_cli.report_descriptors)
    report = new_report()
    code = 2
    try:
        code = evaluate(sys.stdin.read(), report, started)
    except BaseException as e:  # noqa: BLE001 - reading stdin failed, or worse
        report.update(status="error", message="the runner failed: %s" % what(e))
    finally:
        report["seconds"]["main"] = time.perf_counter() - started
        built = sys.modules.get("anvil.load_inline")
        if built is not None and built.BUILDS:  # a single file's load_inline builds (the judge ran them)
            report["builds"] = list(built.BUILDS)
        for key in report["seconds"]:
            report["seconds"][key] = round(report["seconds"][key], 3)
        channel.send(report)
    return code


def entry():
    """`python -I -c "...; runner.entry()"`: run, flush, and skip interpreter teardown (candidate
    threads, atexit hooks and a broken CUDA context must not change the exit status or hang the
    runner after the report is out)."""
    exit_after(main)


if __name__ == "__main__":
    from anvil import runner as _runner  # the importable module, so every module sees one Outcome class

    _runner.entry()
