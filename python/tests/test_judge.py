"""The defended runner (anvil.judge + anvil.candidate), driven as anvil drives it.

Candidates here are plain Python (no extension), so a correct one computes with torch; where a
test needs one to pass, the request's policy allows the ops it uses (the policy is data). The
bundled hack suite (examples/hacks, test_hack_suite.py) covers real kernels."""
import os
import time
import shutil
import tempfile
import textwrap

import pytest
import torch
from torch import nn

from test_runner import DEVICE, PYTHON_DIR, STRICT, TASK, evaluate  # noqa: F401 - one runner harness

from anvil import share
from anvil import timing as timing_rule

HEAD = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = scale

    def reference(self, x, shift):
        return torch.addmm(self.lin.bias, x, self.lin.weight.t()) * self.scale + shift
"""
TORCH_OPS = ["addmm", "mul", "add", "t", "transpose", "as_strided", "expand", "empty_like", "empty", "clone",
             "copy_", "detach", "view", "_to_copy", "to"]


@pytest.fixture
def make(tmp_path):
    counter = [0]

    def build(forward, allow=None, prelude="", timing=None, task=TASK, **fields):
        counter[0] += 1
        root = tmp_path / ("case%d" % counter[0])
        cand = root / "candidate"
        cand.mkdir(parents=True)
        (root / "model.py").write_text(textwrap.dedent(task))
        (cand / "model_new.py").write_text(textwrap.dedent(prelude) + textwrap.dedent(HEAD) + textwrap.indent(
            textwrap.dedent(forward), "    "))
        defenses = {"enabled": True}
        if allow is not None:
            defenses["policy"] = {"allowed_ops": allow}
        request = {"protocol": "anvil.runner/1", "task_file": str(root / "model.py"), "candidate_dir": str(cand),
                   "device": DEVICE, "seed": 99, "trials": 3, "tolerance": STRICT,
                   "timing": dict({"measure": ["candidate", "eager"], "warmup": 1, "calls": 4, "input_sets": 2},
                                  **(timing or {})),
                   "defenses": defenses}
        request.update(fields)
        return request

    return build


LEAN = {"lean_bytes": 0}  # every evaluation lean, as one whose inputs take LEAN_BYTES or more
# The candidate's calls before the judge's batch under make()'s request: 6 verification calls (3
# trials, 2 calls each) and the stress sets' (two each: Judge.blind_sets), then its in-process timing
# (Judge.schedule): 1 warm-up, the launch probes on a GPU, 4 timed, and the inspected ones.
VERIFY_CALLS = 6 + 2 * share.checks()["stress_trials"]
CALLS_BEFORE_BATCH = VERIFY_CALLS + 1 + (3 if DEVICE == "cuda" else 0) + 4 + timing_rule.inspected_calls(4)
LEAN_OR_NOT = pytest.mark.parametrize("timing", [None, LEAN], ids=["kept", "lean"])

CORRECT = """
def forward(self, x, shift):
    return self.reference(x, shift)
"""


def outcome(report):
    return report["outcome"], report.get("reason")


def test_torch_compute_is_a_torch_fallback(make):
    report = evaluate(make(CORRECT)).report
    assert outcome(report) == ("hack_suspected", "torch_fallback")
    assert "aten::addmm" in report["message"]
    assert report["hack"]["reasons"][0]["reason"] == "torch_fallback"


def test_allowed_ops_pass_and_are_timed(make):
    report = evaluate(make(CORRECT, allow=TORCH_OPS)).report
    assert report["outcome"] is None, report["message"]
    assert report["verify"]["passed"] == 3
    assert report["timing"]["candidate"]["median_ms"] > 0
    assert report["defenses"]["sandbox"]["filesystem"].startswith("new root")
    batch = report["timing"]["candidate"]["batch"]
    assert batch["calls"] >= 2 and batch["wall_ms"] > 0 and batch["checked"]["calls"] == batch["calls"]
    assert report["timing"]["eager"]["batch"]["calls"] >= 2
    # As precise as the reference: proved by the bound, without the float64 run.
    precision = report["defenses"]["precision"]
    assert precision["by"] == "bound" and precision["difference"] <= precision["bound"]


def test_the_candidates_timing_counts_under_timing_seconds(make):
    # Baselines cached (only the candidate measured): seconds.timing was 0.0 beside a candidate timed
    # for seconds (issue 23). The trials count under verify, every measurement under timing.
    report = evaluate(make(CORRECT, allow=TORCH_OPS, timing={"measure": ["candidate"]})).report
    assert report["outcome"] is None, report["message"]
    seconds = report["seconds"]
    assert seconds["verify"] > 0, seconds
    assert seconds["timing"] >= report["timing"]["candidate"]["seconds"] > 0, seconds


def test_a_lean_evaluation_draws_every_set_when_used_and_passes_an_honest_candidate(make):
    """A task whose inputs reach timing.lean_bytes (here 0: every task) is evaluated lean: each
    process draws a trial's inputs for each use and keeps none (docs/runner-protocol.md)."""
    report = evaluate(make(CORRECT, allow=TORCH_OPS, timing=LEAN)).report
    assert report["outcome"] is None, report["message"]
    assert report["defenses"]["inputs"]["lean"] is True and report["defenses"]["inputs"]["set_bytes"] > 0
    assert report["verify"]["passed"] == 3
    batch = report["timing"]["candidate"]["batch"]
    assert batch["checked"]["calls"] == batch["calls"] >= 1
    assert report["timing"]["eager"]["median_ms"] > 0


def test_one_trial_comes_from_the_judge_alone(make):
    # The candidate's process makes no trial of its own: it waits for the judge's.
    report = evaluate(make(CORRECT, allow=TORCH_OPS, trials=1)).report
    assert report["outcome"] is None, report["message"]
    assert report["verify"]["passed"] == 1


def test_precision_beyond_the_bound_is_decided_by_the_float64_run(make):
    # An error of ~9e-6 relative: above the bound (2^-17), within the strict tolerance (1e-5).
    forward = """
    def forward(self, x, shift):
        y = self.reference(x, shift)
        return y + 1e-5 * y.abs().mean()
    """
    report = evaluate(make(forward, allow=TORCH_OPS + ["abs", "mean"])).report
    assert report["outcome"] is None, report["message"]
    precision = report["defenses"]["precision"]
    assert "by" not in precision and precision["checked"]
    assert precision["candidate_error"] <= precision["limit"]


def test_candidate_out_of_gpu_memory_says_so(make):
    # Its own allocation failing after verification (here while timed) is its runtime_error, named
    # gpu_memory, also when wrapped; any other failure of its own has no reason.
    forward = """
    def forward(self, x, shift):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 6:
            try:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            except torch.OutOfMemoryError as e:
                raise RuntimeError("my kernel's workspace") from e
        return self.reference(x, shift)
    """
    report = evaluate(make(forward, allow=TORCH_OPS)).report
    assert outcome(report) == ("runtime_error", "gpu_memory"), report["message"]
    assert "my kernel's workspace" in report["message"]
    report = evaluate(make(forward.replace("torch.OutOfMemoryError(", "KeyError("), allow=TORCH_OPS)).report
    assert outcome(report) == ("runtime_error", None), report["message"]


def test_replaced_timer_is_caught(make):
    prelude = "import time\ntime.perf_counter = lambda: 0.0\n"
    report = evaluate(make(CORRECT, allow=TORCH_OPS, prelude=prelude)).report
    assert outcome(report) == ("hack_suspected", "harness_patched")
    assert "time.perf_counter" in report["message"]


def test_patched_harness_module_is_caught(make):
    prelude = "import sys\nsys.modules['anvil.output_compare'].compare = lambda *a, **k: []\n"
    report = evaluate(make(CORRECT, allow=TORCH_OPS, prelude=prelude)).report
    assert outcome(report) == ("hack_suspected", "harness_patched")
    assert "anvil.output_compare.compare" in report["message"]


def test_background_thread_is_caught(make):
    forward = """
    def forward(self, x, shift):
        import threading, time
        out = torch.empty(x.shape[0], self.lin.weight.shape[0])
        def late():
            time.sleep(0.2)
            out.copy_(self.reference(x, shift))
        threading.Thread(target=late).start()
        return out
    """
    report = evaluate(make(forward, allow=TORCH_OPS)).report
    assert outcome(report) == ("hack_suspected", "threads")


def test_child_process_is_caught(make):
    forward = """
    def forward(self, x, shift):
        import os, time
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        return self.reference(x, shift)
    """
    report = evaluate(make(forward, allow=TORCH_OPS)).report
    assert outcome(report) == ("hack_suspected", "threads")
    assert "process" in report["message"]


def _processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except (OSError, ValueError):
            pass
    return found


def test_daemon_process_is_caught_and_killed(make):
    """A double fork leaves a grandchild the candidate's process no longer sees: it lands on the
    PID 1 of the candidate's own PID namespace, is flagged, and dies with the namespace."""
    forward = """
    def forward(self, x, shift):
        import os, sys, time
        if not getattr(ModelNew, "spawned", False):
            ModelNew.spawned = True
            middle = os.fork()
            if middle == 0:
                if os.fork() == 0:
                    os.setsid()
                    os.execv("/bin/sleep", ["sleep", "123.4567"])
                os._exit(0)
            os.waitpid(middle, 0)
        return self.reference(x, shift)
    """
    run = evaluate(make(forward, allow=TORCH_OPS))
    assert outcome(run.report) == ("hack_suspected", "threads"), run.report["message"]
    assert "1 process(es)" in run.report["message"]
    assert _processes_with("123.4567") == []


def test_tensor_subclass_output_is_caught(make):
    forward = """
    def forward(self, x, shift):
        class Lazy(torch.Tensor):
            pass
        return self.reference(x, shift).as_subclass(Lazy)
    """
    report = evaluate(make(forward, allow=TORCH_OPS + ["alias"])).report
    assert outcome(report) == ("hack_suspected", "lazy_output")


def test_lower_precision_output_is_caught(make):
    forward = """
    def forward(self, x, shift):
        return self.reference(x, shift).half()
    """
    report = evaluate(make(forward, allow=TORCH_OPS)).report
    assert outcome(report) == ("hack_suspected", "precision")


def test_lower_precision_compute_is_caught(make):
    forward = """
    def forward(self, x, shift):
        y = self.reference(x.bfloat16().float(), shift)
        return y
    """
    paper = {"preset": "paper", "float32": {"atol": 1e-1, "rtol": 1e-1, "norm": None}}
    report = evaluate(make(forward, allow=TORCH_OPS, tolerance=paper)).report
    assert outcome(report) == ("hack_suspected", "precision")
    assert report["defenses"]["precision"]["candidate_error"] > report["defenses"]["precision"]["limit"]


def test_unwritten_output_holds_the_sentinel(make):
    forward = """
    def forward(self, x, shift):
        out = torch.empty(x.shape[0], self.lin.weight.shape[0])
        out[0].copy_(self.reference(x, shift)[0])
        return out
    """
    report = evaluate(make(forward, allow=TORCH_OPS + ["select", "slice"])).report
    assert outcome(report) == ("wrong_answer", "unwritten_output")


@LEAN_OR_NOT
def test_memoized_output_is_caught(make, timing):
    forward = """
    def forward(self, x, shift):
        if getattr(self, "memo", None) is None or self.memo[0].shape != x.shape or self.n < %d:
            self.memo = (x, self.reference(x, shift))
        self.n = getattr(self, "n", 0) + 1
        return self.memo[1]
    """ % VERIFY_CALLS
    report = evaluate(make(forward, allow=TORCH_OPS, timing=timing)).report
    assert outcome(report) == ("hack_suspected", "timed_output_mismatch")


@LEAN_OR_NOT
def test_input_mutation_is_caught(make, timing):
    forward = """
    def forward(self, x, shift):
        y = self.reference(x, shift)
        x.zero_()
        return y
    """
    report = evaluate(make(forward, allow=TORCH_OPS + ["zero_"], timing=timing)).report
    assert outcome(report) == ("wrong_answer", "input_mutated")


def test_writing_files_is_refused(make, tmp_path):
    """Writes to the candidate's own directory fail (read-only); writes to /tmp land in a private
    tmpfs that vanishes with the process."""
    forward = """
    def forward(self, x, shift):
        import os
        open("/tmp/anvil-judge-test-leak.txt", "w").write("x")
        open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "leak.txt"), "w").write("x")
        return self.reference(x, shift)
    """
    request = make(forward, allow=TORCH_OPS)
    report = evaluate(request).report
    assert report["outcome"] == "runtime_error"
    assert "Read-only file system" in report["message"]
    assert not os.path.exists(os.path.join(request["candidate_dir"], "leak.txt"))
    assert not os.path.exists("/tmp/anvil-judge-test-leak.txt")


def test_crash_of_the_candidate_process(make):
    forward = """
    def forward(self, x, shift):
        import os
        os.abort()
    """
    report = evaluate(make(forward, allow=TORCH_OPS)).report
    assert outcome(report) == ("runtime_error", "process_died")
    assert "signal 6" in report["message"], report["message"]


def test_a_checkout_under_tmp_still_imports_once_confined(make, tmp_path):
    """The candidate's process gets a private /tmp, but not over anvil's own modules (a clone
    in /tmp), which it imports lazily after confinement; the candidate here lives in /dev/shm."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    assert str(tmp_path).startswith("/tmp/")
    shutil.copytree(os.path.join(PYTHON_DIR, "anvil"), str(tmp_path / "py" / "anvil"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(PYTHON_DIR, "..", "share"), str(tmp_path / "share"))
    request = make(CORRECT, allow=TORCH_OPS)
    shm = tempfile.mkdtemp(dir="/dev/shm", prefix="anvil-test-")
    try:
        shutil.copy(request["task_file"], os.path.join(shm, "model.py"))
        shutil.copytree(request["candidate_dir"], os.path.join(shm, "candidate"))
        request.update(task_file=os.path.join(shm, "model.py"), candidate_dir=os.path.join(shm, "candidate"))
        report = evaluate(request, python_dir=str(tmp_path / "py")).report
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    assert outcome(report) == (None, None), report["message"] + report["detail"]


@LEAN_OR_NOT
def test_outputs_wrong_only_in_the_judges_batch_are_caught(make, timing):
    """Right through verification and the in-process timing, wrong afterwards: the judge's own batch
    (secret inputs, every call sampled) sees it."""
    forward = """
    def forward(self, x, shift):
        ModelNew.calls = getattr(ModelNew, "calls", 0) + 1
        if ModelNew.calls > %d:  # CALLS_BEFORE_BATCH
            return torch.zeros(x.shape[0], self.lin.out_features)
        return self.reference(x, shift)
    """ % CALLS_BEFORE_BATCH
    report = evaluate(make(forward, allow=TORCH_OPS, timing=timing)).report
    assert outcome(report) == ("hack_suspected", "timed_output_mismatch"), report["message"]
    assert "judge's timed batch" in report["message"]


def test_a_batch_that_holds_the_claim_down_is_timed_again(make):
    """Slow in every call of the judge's batches (4 ms more), fast when its process times itself:
    each timed batch holds the claim down, so the judge times it again (each checked): twice when
    two agree within batch.AGREE, else three times, no more; the fastest is kept."""
    forward = """
    def forward(self, x, shift):
        ModelNew.calls = getattr(ModelNew, "calls", 0) + 1
        if ModelNew.calls > %d:  # CALLS_BEFORE_BATCH
            import time
            time.sleep(0.004)
        return self.reference(x, shift)
    """ % CALLS_BEFORE_BATCH
    report = evaluate(make(forward, allow=TORCH_OPS, timing={"bound": {"slack": 0.03, "claim": "median_ms"}})).report
    assert outcome(report) == (None, None), report["message"]
    batch = report["timing"]["candidate"]["batch"]
    assert 2 <= len(batch["timed_batches"]) <= 3
    assert batch["per_call_ms"] == min(batch["timed_batches"]) and batch["per_call_ms"] > 4


def judge_rules(ref_ms, eager_batch_ms, cached=False):
    """A Judge's sizing and repeat rules on their own: one timed reference call (ref_ms), eager's
    batch per call (this evaluation's, or anvil's cached one), a task whose inputs take no memory."""
    from types import SimpleNamespace

    import torch

    from anvil.judge import Judge

    bound = {"slack": 0.03}
    eager = {}
    if cached:
        bound["eager_batch_per_call_ms"] = eager_batch_ms
    elif eager_batch_ms:
        eager = {"batch": {"per_call_ms": eager_batch_ms}}
    judge = SimpleNamespace(req={"timing": {"bound": bound}}, ref_ms=ref_ms, report={"timing": {"eager": eager}},
                            device=torch.device("cpu"), signature=[], set_bytes=lambda: 0)
    for name in ("eager_batch_ms", "reference_ms", "holds_down", "batch_size"):
        setattr(judge, name, getattr(Judge, name).__get__(judge))
    return judge


@pytest.mark.parametrize("cached", [False, True])
def test_a_stalled_reference_call_does_not_cut_a_fast_candidates_batch(cached):
    """check_reference's one timed call read 28 ms for a 0.024 ms reference on a loaded host (its
    events count the host's stall): as the MAX_SPEEDUP cap it sized an 18 us candidate's batch to 18
    calls, whose clock's fixed cost doubled the time per call and cut an honest reward (2 -> 1,
    level2/28 in bench/results/multi-gpu-2026-11-28-overlap). Eager's batch on the judge's clock
    (this evaluation's or cached) caps it instead; eager's own batch, sized again, by itself."""
    from anvil import batch

    stalled = judge_rules(ref_ms=28.0, eager_batch_ms=0.024, cached=cached)
    assert stalled.batch_size("candidate", 0.018) == batch.MAX_CALLS
    # with no eager figure yet, the one call is all there is
    assert judge_rules(ref_ms=28.0, eager_batch_ms=None).batch_size("candidate", 0.018) == 18
    # eager's batch, sized again by its first batch's time per call: capped by that, not the stalled call
    first = judge_rules(ref_ms=28.0, eager_batch_ms=None)
    assert first.batch_size("eager", 28.0) == 2                       # its first batch, sized by the call
    assert first.batch_size("eager", 0.024) == 72                     # again, capped by the stalled call
    assert first.batch_size("eager", 0.024, 0.024) == batch.MAX_CALLS  # again, capped by its own clock
    # a claim far under the reference still buys no more than MAX_SPEEDUP allows
    slow = judge_rules(ref_ms=10.0, eager_batch_ms=10.0, cached=cached)
    assert slow.batch_size("candidate", 1e-6) == batch.MAX_SPEEDUP


def test_the_batch_is_timed_again_until_two_agree_or_three():
    """The repeat rule alone: again while the fastest holds the claim down, up to three batches,
    unless the last two agree within batch.AGREE (then the time is the candidate's, not a stall)."""
    from types import SimpleNamespace

    from anvil import batch
    from anvil.judge import Judge

    judge = judge_rules(ref_ms=1.0, eager_batch_ms=1.0)
    assert Judge.time_again(judge, [2.0], 1.0)                        # holds a 1 ms claim down
    assert not Judge.time_again(judge, [1.0], 1.0)                    # backs it
    assert Judge.time_again(judge, [2.0, 3.0], 1.0)                   # disagree: a stall, perhaps
    assert not Judge.time_again(judge, [2.0, 2.0 * (1 + batch.AGREE / 2)], 1.0)  # agree: its own time
    assert not Judge.time_again(judge, [2.0, 3.0, 4.0], 1.0)          # three at most


def test_a_batch_that_backs_the_claim_is_timed_once(make):
    """With eager's figures from anvil (cached baselines) that make any batch back the claim, one
    timed batch (two when the first, sized by a claim that a loaded machine stretched, ran under
    half its target and was sized again: run_batch's resize, not a re-timing)."""
    bound = {"slack": 0.03, "claim": "median_ms", "eager_ms": 1e-9, "eager_batch_per_call_ms": 1e9}
    report = evaluate(make(CORRECT, allow=TORCH_OPS, timing={"measure": ["candidate"], "bound": bound})).report
    assert outcome(report) == (None, None), report["message"]
    batch = report["timing"]["candidate"]["batch"]
    assert len(batch["timed_batches"]) <= 2, batch


def test_a_reply_the_judge_did_not_ask_for_is_a_protocol_violation(make):
    prelude = """
    import gc, json, socket
    for _s in gc.get_objects():
        if isinstance(_s, socket.socket) and _s.family == socket.AF_UNIX and _s.type == socket.SOCK_SEQPACKET:
            try:
                _s.send(json.dumps({"type": "timing", "result": {"median_ms": 0.001}}).encode())
            except OSError:
                pass
    """
    report = evaluate(make(CORRECT, allow=TORCH_OPS, prelude=prelude)).report
    assert outcome(report) == ("hack_suspected", "protocol"), report["message"]


@pytest.mark.skipif(DEVICE != "cuda", reason="on the CPU the batch's inputs reach the candidate as a copy")
@LEAN_OR_NOT
def test_modifying_the_judges_batch_inputs_is_caught(make, timing):
    """On a GPU the batch's inputs are the judge's own memory: a candidate that changes them is seen."""
    forward = """
    def forward(self, x, shift):
        out = self.reference(x, shift)
        ModelNew.calls = getattr(ModelNew, "calls", 0) + 1
        if ModelNew.calls > 11:
            x.zero_()
        return out
    """
    report = evaluate(make(forward, allow=TORCH_OPS + ["zero_"], timing=timing)).report
    assert outcome(report) == ("wrong_answer", "input_mutated"), report["message"]


def test_without_cached_eager_the_repeat_rule_takes_eagers_batch_over_one_wall_clock_call():
    """No cached baselines: eager's time is guessed from this evaluation's eager batch (1 ms a call),
    not from one wall-clock reference call (5 ms): a candidate batch of 1.02 ms a call backs a
    1 ms claim (no repeat); one of 3 ms does not."""
    from anvil.judge import Judge

    judge = judge_rules(ref_ms=5.0, eager_batch_ms=1.0)
    assert not Judge.holds_down(judge, 1.02, 1.0)
    assert Judge.holds_down(judge, 3.0, 1.0)


def test_plan_inputs_sizes_a_task_without_memory_and_makes_a_large_one_lean(tmp_path):
    """The meta device gives one set's size (4 GiB here) without drawing it; a get_inputs() that
    needs real tensors gives no size, and the evaluation keeps its sets."""
    import json

    import torch

    from anvil.harness import Harness
    from anvil.runner import parse_request

    def plan(body):
        task = tmp_path / "task.py"
        task.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return x
        def get_init_inputs():
            return []
        """) + textwrap.dedent(body))
        h = Harness(parse_request(json.dumps({"protocol": "anvil.runner/1", "task_file": str(task),
                                              "candidate_dir": str(tmp_path), "device": "cpu"})))
        h.torch = torch
        h.load_task()
        planned = h.plan_inputs(), h.input_bytes
        assert not getattr(h.task, "CACHE", None), "get_inputs() ran in this process"
        return planned

    assert plan("def get_inputs():\n    return [torch.rand(1 << 30), 3]\n") == (True, 4 << 30)
    assert plan("def get_inputs():\n    return [torch.rand(1 << 20)]\n") == (False, 4 << 20)
    assert plan("def get_inputs():\n    return [torch.from_numpy(torch.rand(4).numpy())]\n") == (False, None)
    # Sized in a forked child: a task that caches its inputs keeps no meta tensor here, and one that
    # names another device (cuda, absent here) only fails to give a size.
    lazy = "CACHE = []\ndef get_inputs():\n    if not CACHE:\n        CACHE.append(torch.rand(256))\n    return CACHE\n"
    assert plan(lazy) == (False, 1024)
    assert plan("def get_inputs():\n    return [torch.rand(4, device='cuda')]\n") == (False, None)


def test_running_out_of_gpu_memory_drawing_inputs_is_anvils_limit_not_the_tasks(tmp_path):
    """An out-of-memory while drawing a task's inputs on the device or moving them there (or
    raised while handling one) is CannotServe, anvil's limit, not a task_error the task would be
    blamed for; the task's own failures stay task_error. (The device is named cuda here; the
    task fails before any tensor is made.)"""
    import json

    import torch

    from anvil.harness import CannotServe, Harness, Outcome
    from anvil.runner import parse_request

    task = tmp_path / "task.py"
    task.write_text(textwrap.dedent("""
    import torch
    import torch.nn as nn
    MODE = ["oom"]
    class Model(nn.Module):
        def forward(self, x):
            return x
    def get_init_inputs():
        return []
    def get_inputs():
        if MODE[0] == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 30.00 GiB")
        if MODE[0] == "wrapped":
            try:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            except torch.OutOfMemoryError:
                raise ValueError("the task's own wrapper")
        raise ValueError("the task's own bug")
    """))
    h = Harness(parse_request(json.dumps({"protocol": "anvil.runner/1", "task_file": str(task),
                                          "candidate_dir": str(tmp_path), "device": "cpu"})))
    h.torch = torch
    h.load_task()
    h.device = torch.device("cuda")
    with pytest.raises(CannotServe, match="ran out of memory drawing the task's inputs .*30.00 GiB"):
        h.fresh_inputs(7, 1)
    h.task.MODE[0] = "wrapped"
    with pytest.raises(CannotServe, match="2.00 GiB"):
        h.fresh_inputs(7, 1)
    h.task.MODE[0] = "bug"
    with pytest.raises(Outcome) as failed:
        h.fresh_inputs(7, 1)
    assert failed.value.outcome == "task_error" and "the task's own bug" in failed.value.message

    import anvil.harness as harness_module

    def oom_move(args, fn):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    saved, harness_module.map_tensors = harness_module.map_tensors, oom_move
    try:
        with pytest.raises(CannotServe, match="moving the task's inputs to it .*8.00 GiB"):
            h.to_device([torch.zeros(1)])
    finally:
        harness_module.map_tensors = saved


KERNELBENCH = {"rules": {"name": "kernelbench", "torch_ops": True, "own_work": False, "weights": "by_name_or_seed"}}


def kernelbench(request):
    """The request as the kernelbench protocol makes it (share/protocol.json, env/protocol.cpp)."""
    request.update(KERNELBENCH)
    request["defenses"]["policy"] = {"torch_ops": True, "own_work": False}
    return request


@LEAN_OR_NOT
def test_kernelbench_protocol_allows_torch_compute_with_every_defense_on(make, timing):
    """What cuda-agent calls torch_fallback is KernelBench's rule: torch ops may compute. The
    judge's own checks still hold: a wrong torch answer is wrong, an input changed is caught."""
    report = evaluate(kernelbench(make(CORRECT, timing=timing))).report
    assert report["outcome"] is None, report["message"]
    assert report["verify"]["passed"] == 3 and report["timing"]["candidate"]["median_ms"] > 0
    wrong = """
    def forward(self, x, shift):
        return self.reference(x, shift) * 1.001
    """
    assert outcome(evaluate(kernelbench(make(wrong, timing=timing))).report) == ("wrong_answer", "mismatch")
    mutates = """
    def forward(self, x, shift):
        y = self.reference(x, shift)
        x.zero_()
        return y
    """
    assert evaluate(kernelbench(make(mutates, timing=timing))).report["outcome"] == "wrong_answer"


HOST_ONLY_INPUTS = """
def get_inputs():
    x = torch.randn(8, 16)
    return [x / float(x.abs().max().item()), 3]  # a value of the data: cannot run on the meta device
"""
# get_inputs() with state of its own that torch.manual_seed does not reset: a generator made once
# (its draws depend on how many came before), a cache of the first draw, no seed at all.
STATEFUL_INPUTS = {
    "generator": """
import numpy as np
_rng = np.random.default_rng(0)
def get_inputs():
    return [torch.from_numpy(_rng.standard_normal((8, 16)).astype(np.float32)), 3]
""",
    "cached": """
_cache = []
def get_inputs():
    if not _cache:
        _cache.append(torch.randn(8, 16))
    return [_cache[0] * 1, 3]
""",
    "unseeded": """
import numpy as np
def get_inputs():
    return [torch.from_numpy(np.random.default_rng().standard_normal((8, 16)).astype(np.float32)), 3]
"""}


def with_inputs(request, source):
    """The request's task with get_inputs() replaced by `source`."""
    path = request["task_file"]
    with open(path) as f:
        task = f.read()
    with open(path, "w") as f:
        f.write(task.replace("def get_inputs():\n    return [torch.randn(8, 16), 3]\n", source))
    return request


@pytest.mark.parametrize("draws", [None, "each", "split"])
@pytest.mark.parametrize("task", ["drawable", "host_only"])
def test_trials_are_drawn_by_each_process_where_the_task_allows_it(make, task, draws):
    """By default each process draws every trial itself on a GPU (on the device) and the two
    halves are split on the CPU; a task whose get_inputs() cannot run on the meta device is split
    everywhere. The judge's plan is the candidate's process's: an honest candidate passes."""
    request = kernelbench(make(CORRECT, timing={"draws": draws} if draws else None))
    if task == "host_only":
        with_inputs(request, HOST_ONLY_INPUTS)
    report = evaluate(request).report
    assert report["outcome"] is None, report["message"]
    assert report["verify"]["passed"] == 3
    inputs = report["defenses"]["inputs"]
    each = task == "drawable" and (draws == "each" or (draws is None and DEVICE == "cuda"))
    assert inputs["draws"] == ("each" if each else "split"), inputs
    assert inputs["on_device"] == (each and DEVICE == "cuda"), inputs
    assert inputs.get("drawn_again", []) == [], inputs  # a function of its seed: drawn alike
    assert (inputs["set_bytes"] is None) == (task == "host_only"), inputs


@pytest.mark.parametrize("trials,input_sets", [(3, 2), (1, 4)])
@pytest.mark.parametrize("kind", sorted(STATEFUL_INPUTS))
def test_inputs_with_state_of_their_own_are_the_judges_in_both_processes(make, kind, trials, input_sets):
    """A get_inputs() whose draws are not a function of the seed alone (a generator made at import,
    a cache, no seed): both processes draw every trial and timing base set in the same order, so
    state of the task's own evolves alike; what still differs (no seed at all) the judge sees by
    digest and sends its own. An honest candidate passes either way, its timed calls' outputs
    checked on the same inputs in both processes (input_sets beyond the trials included)."""
    request = kernelbench(make(CORRECT, timing={"draws": "each", "input_sets": input_sets}, trials=trials))
    report = evaluate(with_inputs(request, STATEFUL_INPUTS[kind])).report
    assert report["outcome"] is None, report["message"]
    assert report["verify"]["passed"] == trials
    inputs = report["defenses"]["inputs"]
    assert inputs["draws"] == "each", inputs
    drawn = max(trials, input_sets)
    assert inputs["drawn_again"] == (list(range(drawn)) if kind == "unseeded" else []), inputs


def test_a_set_that_differs_and_cannot_cross_is_the_tasks_error(make):
    """Inputs that differ between the processes and hold a value that cannot be sent across are
    the task's error, not the candidate's."""
    source = """
import numpy as np
class Shift:  # a number to torch's `+`, no plain value to the channel
    def __radd__(self, other):
        return other + 3
def get_inputs():
    return [torch.from_numpy(np.random.default_rng().standard_normal((8, 16)).astype(np.float32)), Shift()]
"""
    report = evaluate(with_inputs(kernelbench(make(CORRECT, timing={"draws": "each"})), source)).report
    assert report["outcome"] == "task_error", report["message"]
    assert "cannot be sent across" in report["message"]


FORGER = """
def forward(self, x, shift):
    import os, stat
    line = b'{"protocol": "anvil.runner/1", "status": "done", "outcome": null, "message": "FORGED"}\\n'
    for fd in range(3, 1024):  # every pipe this process holds: the report's would take a forged one
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, line)
        except OSError:
            pass
    return self.reference(x, shift)
"""


def test_the_candidates_process_holds_no_descriptor_of_the_report(make):
    """The judge's report descriptors (_cli.report_descriptors) are closed in the candidate's
    process before anything else: a forged report written to every pipe it holds reaches nothing
    (run_runner asserts one JSON line on fd 3)."""
    import json

    report = evaluate(kernelbench(make(FORGER))).report
    assert "FORGED" not in json.dumps(report)
    if DEVICE == "cpu":
        assert report["outcome"] is None, report["message"]
    else:  # CUDA's own pipes in that process take the line too, and its CUDA breaks: its own doing
        assert report["outcome"] is None or (
            report["outcome"] == "runtime_error" and "the candidate's kernels raised" in report["message"]), report


RENAMED = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, scale=2.0):
        super().__init__()
        lin = nn.Linear(n, n)  # made as Model makes it, after the same seed
        self.weight, self.bias = lin.weight, lin.bias
        self.scale = scale

    def forward(self, x, shift):
        return torch.addmm(self.bias, x, self.weight.t()) * self.scale + shift
"""


def test_renamed_parameters_keep_their_seeded_weights_under_kernelbench_only(make):
    """KernelBench builds both models after the same seed and lets the outputs decide; cuda-agent
    loads Model's weights by name and refuses other names."""
    def renamed(body):
        request = make(CORRECT)
        with open(os.path.join(request["candidate_dir"], "model_new.py"), "w") as f:
            f.write(textwrap.dedent(body))
        return request

    report = evaluate(renamed(RENAMED)).report
    assert outcome(report)[0] == "load_error" and "differ" in report["message"]
    report = evaluate(kernelbench(renamed(RENAMED))).report
    assert report["outcome"] is None, report["message"]
    assert report["verify"]["weights"].startswith("seeded: ModelNew's parameters and buffers differ")
    # Parameters made in another order draw other values: the outputs decide, and say why.
    other_order = RENAMED.replace("lin = nn.Linear(n, n)", "torch.rand(3)\n        lin = nn.Linear(n, n)")
    report = evaluate(kernelbench(renamed(other_order))).report
    assert outcome(report) == ("wrong_answer", "mismatch")
    assert "its parameters differing from Model's in name or shape" in report["message"]


def test_a_request_with_unknown_weights_rule_is_refused(make):
    from test_runner import run_runner

    request = make(CORRECT)
    request["rules"] = {"weights": "by_guess"}
    run = run_runner(request)
    assert run.returncode == 2 and "rules.weights 'by_guess'" in run.report["message"]


def test_the_set_up_may_say_cannot_serve_but_nothing_after_it():
    """anvil's own limit met in the candidate's process during set-up (trusted: no candidate code
    yet) is the judge's CannotServe (could not evaluate); said after hello, it breaks the protocol."""
    import socket
    from types import SimpleNamespace

    import torch

    from anvil import channel
    from anvil.harness import CannotServe
    from anvil.judge import Hack, Judge

    def judge_reading(*messages):
        ours, theirs = socket.socketpair()
        for m in messages:
            channel.send(theirs, m)
        judge = SimpleNamespace(sock=ours, device=torch.device("cpu"), clock=lambda name: _nothing(),
                                imported=True, died=lambda: AssertionError("closed"))
        judge.recv = lambda lazy=False: Judge.recv(judge, lazy)
        judge.serve_build = None
        return judge, theirs

    judge, _keep = judge_reading({"type": "cannot_serve", "message": "the GPU ran out of memory drawing"})
    with pytest.raises(CannotServe, match="could not be set up: the GPU ran out of memory drawing"):
        Judge.hello(judge)
    judge, _keep = judge_reading({"type": "cannot_serve", "message": "x"})
    with pytest.raises(Hack) as hack:
        Judge.answer(judge, ("output",), "call")
    assert hack.value.reason == "protocol"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _judge_double(**fields):
    """A Judge's state for calling its methods one at a time (no processes)."""
    from types import SimpleNamespace

    from anvil.judge import Judge

    # No process is stopped nor channel closed here (freeze_candidate would stop the test's own children).
    fields = dict({"freeze_candidate": lambda: None, "close_channel": lambda: None, "together": lambda: False,
                   "room": None}, **fields)
    judge = SimpleNamespace(**fields)
    for name in ("precision_run", "note_precision", "finish_precision", "memory_fault", "memory_allowance", "own_memory_fault",
                 "candidate_alive_on_gpu", "candidate_held", "memory_short", "room_bytes", "check_ops"):
        if name not in fields:  # a method given stands in for the Judge's
            setattr(judge, name, getattr(Judge, name).__get__(judge))
    return judge


def test_a_float64_run_that_does_not_fit_waits_for_the_candidate_to_be_gone():
    """A candidate's process may hold the GPU's memory while the judge checks its precision: the
    check is then deferred, never skipped, and made once the process is gone."""
    from anvil import evidence

    class Model(nn.Module):
        refused = [True]

        def forward(self, x):
            return x * 3

        def double(self):
            if Model.refused[0]:
                Model.refused[0] = False
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
            return super().double()

    x = torch.rand(64, 64)
    expected = x * 3
    got = (x.half() * 3).float()  # computed in fp16: far less accurate than the reference
    pairs = list(evidence.floating_leaves(got, expected))
    judge = _judge_double(torch=torch, ref=Model(), pin_flags=lambda: None, device=torch.device("cpu"), lean=False,
                          sync=lambda: None, free_cached=lambda: None, defenses={"precision_ratio": 16.0},
                          precision=None, precision_checks=[], precision_later=[], supervisor=123,
                          clock=lambda name: _nothing())
    judge.precision_run("trial 3", pairs, lambda: [x], deferrable=True)
    assert judge.precision is None and judge.precision_checks == []  # deferred: nothing decided yet
    assert len(judge.precision_later) == 1
    judge.finish_precision()  # the candidate's process still lives: nothing yet
    assert len(judge.precision_later) == 1
    judge.supervisor = None
    judge.finish_precision()
    assert judge.precision_later == []
    assert judge.precision["checked"] and judge.precision["candidate_error"] > judge.precision["limit"]
    assert judge.precision["at"] == "trial 3" and len(judge.precision_checks) == 1


def test_a_lean_stress_draw_that_comes_out_otherwise_again_is_sent_and_not_judged(monkeypatch):
    """A lean evaluation keeps none of its stress draws: for a candidate process whose own differ it
    draws them again (nothing is drawn twice ahead). Where that draw differs from the first too,
    they are sent all the same (the process waits for them) and the trial is not judged: its answer
    is of the first draw, and a candidate must not fail on a task's non-determinism."""
    from anvil import stress
    from anvil.harness import trial_digest
    from anvil.judge import Judge

    first = [torch.ones(4)]
    draws = iter([[torch.ones(4)], [torch.zeros(4)]])
    monkeypatch.setattr(stress, "draw", lambda harness, name, seed: (next(draws), 1))
    judge = _judge_double(report={"defenses": {"stress": {"skipped": []}}, "verify": {}},
                          defenses={"policy": {"torch_ops": False}})
    sent, judged = Judge.stress_inputs_sent.__get__(judge), Judge.judge_stress.__get__(judge)
    alike = {"name": "signed", "seed": 7, "digest": trial_digest(first), "inputs": None}
    assert torch.equal(sent(alike)[0], first[0]) and "unjudged" not in alike
    otherwise = dict(alike, inputs=None)
    assert torch.equal(sent(otherwise)[0], torch.zeros(4))
    judge.stress_plan = [otherwise]
    judged(0, {"value": torch.full((4,), 1e9)})  # not judged: no Outcome for an output off by far
    assert "stress" not in judge.report["verify"]
    assert "draws otherwise on the same seed" in judge.report["defenses"]["stress"]["skipped"][0]["why"]


def test_a_task_whose_output_is_too_large_to_keep_draws_no_stress_trial(monkeypatch):
    """A stress trial's answer is kept on the GPU until the verification, up to KEEP_STRESS_BYTES:
    a task whose output (trial 0's, known before anything is drawn) is larger plans none, and draws
    none, runs no reference on one and no float64 run (what once asked for 14 GiB beside a GroupNorm
    of 7 GiB inputs and made its evaluation "could not evaluate")."""
    from anvil import judge as judge_module, stress
    from anvil.judge import Judge

    def never(*a, **k):
        raise AssertionError("drawn")

    monkeypatch.setattr(stress, "draw", never)
    gib = 1 << 30
    for output, planned in ((judge_module.KEEP_STRESS_BYTES + 1, False), (judge_module.KEEP_STRESS_BYTES, True)):
        judge = _judge_double(req={"stress": {"trials": 2}, "candidate_kind": "file"}, device=torch.device("cuda", 0),
                              report={"defenses": {}}, stress_plan=[], memory={"output_bytes": output},
                              clock=lambda name: _nothing())
        if planned:  # within the limit the draws begin (here: the stand-in that refuses them)
            with pytest.raises(AssertionError, match="drawn"):
                Judge.plan_stress(judge)
            continue
        Judge.plan_stress(judge)
        skipped = judge.report["defenses"]["stress"]["skipped"]
        assert judge.stress_plan == [] and len(skipped) == 1, skipped
        assert "its output (%.1f GiB) is too large to keep" % (output / gib) in skipped[0]["why"]


def test_a_memory_fault_is_the_candidates_when_its_process_held_more_than_its_share(monkeypatch):
    """The judge ends the candidate's process and measures what its end gives back: over the
    allowance, the candidate's fault (-1, gpu_memory); within it, anvil's limit (CannotServe)."""
    from types import SimpleNamespace

    from anvil.harness import CannotServe, Outcome

    gib = 1 << 30
    for held, expected in ((40 * gib, Outcome), (1 * gib, CannotServe)):
        free = [2 * gib]

        def end_candidate(wait, settle, _held=held):
            free[0] += _held
            judge.candidate_gone = True

        fake_torch = SimpleNamespace(cuda=SimpleNamespace(mem_get_info=lambda device: (free[0], 80 * gib)))
        judge = _judge_double(torch=fake_torch, device=torch.device("cuda", 0), supervisor=123, candidate_gone=False,
                              mapped=None, free_cached=lambda: None, end_candidate=end_candidate, lean=False,
                              req={"trials": 5}, input_bytes=64 << 20, ref=nn.Linear(1024, 1024),
                              report={"defenses": {}},
                              memory={"context_bytes": 600 << 20, "output_bytes": 64 << 20,
                                      "reference_work_bytes": 128 << 20, "batch_calls": 100})
        allowance = judge.memory_allowance()
        assert 4 * gib < allowance < 20 * gib, allowance
        with pytest.raises(expected) as raised:
            judge.memory_fault("drawing a batch's inputs", torch.OutOfMemoryError("CUDA out of memory."))
        if expected is Outcome:
            assert raised.value.outcome == "runtime_error" and raised.value.reason == "gpu_memory"
            assert "while the candidate's process held 40.0 GiB" in raised.value.message
        else:
            assert "the candidate's process holding 1.0 GiB, within its share" in str(raised.value)
        assert judge.report["defenses"]["memory"]["candidate_held_bytes"] == held
    # No live candidate process (or no GPU): anvil's limit, nothing measured.
    judge.supervisor = None
    judge.candidate_gone = None
    with pytest.raises(CannotServe):
        judge.memory_fault("drawing", torch.OutOfMemoryError("CUDA out of memory."))


def test_a_candidates_memory_fault_is_run_again_only_when_a_wave_or_another_job_held_the_room():
    """The candidate's process says the GPU ran out (gpu_memory, its word). Prepared in a wave, the
    judge stops its processes, then measures: what was free, what its process held (its end gives
    it back) and what the others held. Tried again alone (CannotServe, memory_limited) only when its
    process held no more than its share and the others held more than was free; else its outcome
    stands. Prepared alone, the others are another job's processes, measured the same way. Not fooled by a process that lets its
    memory go once it has failed (stopped first), by the judge's own batch pools (counted as the
    judge's), or by a context's measure that holds the wave-mates' memory (capped in a wave)."""
    from types import SimpleNamespace

    from anvil.harness import CannotServe, Outcome

    gib = 1 << 30
    total = 80 * gib
    Case = dict
    cases = (
        Case(others=60 * gib, held=2 * gib, again=True),   # the wave held 60 GiB, 16 free: the wave's doing
        Case(others=4 * gib, held=2 * gib),                # little beside it, 72 GiB free: its own
        Case(others=60 * gib, held=18 * gib),              # its process held more than its share
        # Prepared alone, another job on the GPU held the room: not the candidate's doing either.
        Case(others=60 * gib, held=2 * gib, together=False, again=True),
        Case(others=4 * gib, held=2 * gib, together=False),  # alone, little beside it: its own
        # It filled the GPU itself and lets go once it has said so: stopped first, it is measured holding it.
        Case(others=4 * gib, held=70 * gib, releases=True),
        # The judge's own batch pool (outside torch's allocator) is not the wave's memory.
        Case(others=4 * gib, held=2 * gib, pool=60 * gib),
        # Its context measured beside the wave (the wave's memory in it) does not widen its share.
        Case(others=40 * gib, held=30 * gib, context=40 * gib),
    )
    for case in cases:
        together, others, held = case.get("together", True), case["others"], case["held"]
        pool = case.get("pool", 0)
        state = {"free": total - others - held - pool - gib, "frozen": False, "reads": 0}

        def mem_get_info(device, _held=held, _case=case):
            state["reads"] += 1
            if _case.get("releases") and not state["frozen"] and state["reads"] == 2:
                state["free"] += _held  # let go between the judge's two reads, were it not stopped
            return state["free"], total

        def end_candidate(wait, settle, _held=held):
            state["free"] += _held
            judge.candidate_gone = True

        fake_torch = SimpleNamespace(cuda=SimpleNamespace(mem_get_info=mem_get_info, memory_reserved=lambda device: 0,
                                                          memory_allocated=lambda device: 0))
        room = SimpleNamespace(pool=SimpleNamespace(nbytes=pool), retired=[]) if pool else None
        judge = _judge_double(torch=fake_torch, device=torch.device("cuda", 0), supervisor=123, candidate_gone=False,
                              mapped=None, free_cached=lambda: None, end_candidate=end_candidate, lean=False,
                              together=lambda _t=together: _t, req={"trials": 5}, input_bytes=64 << 20,
                              ref=nn.Linear(1024, 1024), report={"defenses": {}}, room=room,
                              freeze_candidate=lambda: state.update(frozen=True),
                              memory={"context_bytes": case.get("context", 600 << 20), "output_bytes": 64 << 20,
                                      "reference_work_bytes": 128 << 20, "batch_calls": 100})
        failed = Outcome("runtime_error", "forward: CUDA out of memory. Tried to allocate 20.00 GiB", reason="gpu_memory")
        if case.get("again"):
            with pytest.raises(CannotServe) as raised:
                judge.memory_short(failed)
            said = "parked beside it held 60.0 GiB" if together else "other processes on the GPU held 60.0 GiB"
            assert raised.value.memory_limited and said in str(raised.value), raised.value
        else:
            assert judge.memory_short(failed) is failed, case
        memory = judge.report["defenses"]["memory"]
        assert memory["candidate_held_bytes"] == held and memory["others_bytes"] == others, (memory, case)
        assert state["frozen"] and judge.candidate_gone


def test_the_judge_hands_its_idle_cache_back_before_each_command():
    """A float64 run of a large task's reference leaves tens of GiB in the judge's allocator cache;
    the candidate's process, asked next to draw its inputs, ran out beside it (KernelBench's 96, an
    H100, 2026-12-07). Before every command the judge hands back what it keeps cached beyond
    IDLE_CACHE_BYTES, and keeps a small cache (no cost per command)."""
    import socket
    from types import SimpleNamespace

    from anvil import channel
    from anvil.judge import IDLE_CACHE_BYTES, Judge

    gib = 1 << 30
    for reserved, allocated, handed_back in ((40 * gib, 2 * gib, True), (2 * gib + IDLE_CACHE_BYTES // 2, 2 * gib, False)):
        freed = []
        ours, theirs = socket.socketpair()
        cuda = SimpleNamespace(memory_reserved=lambda device, _r=reserved: _r,
                               memory_allocated=lambda device, _a=allocated: _a)
        judge = SimpleNamespace(sock=ours, device=torch.device("cuda", 0), torch=SimpleNamespace(cuda=cuda),
                                free_cached=lambda: freed.append(True), died=lambda: AssertionError("closed"))
        judge.hand_back_cache = lambda: Judge.hand_back_cache(judge)
        Judge.ask(judge, {"type": "draw"}, ("drawn",), deadline=time.perf_counter())
        assert channel.recv(theirs)["type"] == "draw"
        assert freed == ([True] if handed_back else []), (reserved, allocated)


def test_an_unexpected_memory_fault_of_the_judges_own_work_is_measured():
    """A comparison's or digest's allocation failing (not caught where it happened) is decided by
    memory_fault, not left to the runner's catch-all (which would blame the candidate unseen)."""
    from anvil.harness import CannotServe, Outcome

    faults = []
    judge = _judge_double(torch=torch, stage="verify",
                          memory_fault=lambda doing, e: faults.append((doing, str(e))))
    wrapped = RuntimeError("comparing")
    wrapped.__cause__ = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
    judge.own_memory_fault(wrapped)
    assert faults == [("in the judge's work during verify", "CUDA out of memory. Tried to allocate 2.00 MiB")]
    for other in (ValueError("a bug"), Outcome("runtime_error", "CUDA out of memory"), CannotServe("out of memory")):
        judge.own_memory_fault(other)
    assert len(faults) == 1



@LEAN_OR_NOT
def test_baselines_alone_imports_no_candidate(make, timing):
    """candidate_kind "none" (anvil baselines): eager with the judge's batch and torch.compile, and
    no candidate imported: a model_new.py that would fail at import is never read."""
    request = make('raise SystemExit("imported")', candidate_kind="none",
                   timing=dict({"measure": ["eager", "compile"]}, **(timing or {})))
    report = evaluate(request).report
    assert report["outcome"] is None and report["status"] == "done", report
    assert set(report["timing"]) == {"eager", "compile"}, report["timing"]
    assert report["timing"]["eager"]["median_ms"] > 0 and report["timing"]["eager"]["batch"]["per_call_ms"] > 0
    assert report["timing"]["eager"]["load"]["candidate_gone"] is True
    compile_entry = report["timing"]["compile"]
    assert compile_entry.get("median_ms", 0) > 0 or "error" in compile_entry
    assert "hack" not in report and "static" not in report["defenses"]


def test_baselines_alone_refuses_to_time_a_candidate(make):
    from test_runner import run_runner

    run = run_runner(make(CORRECT, candidate_kind="none", timing={"measure": ["candidate"]}))
    assert run.returncode == 2 and run.report["status"] == "error"
    assert "has no candidate to time" in run.report["message"]


def waiting_at(lock, thread, limit_s=240):
    """Returns once a runner waits for `lock` (it holds the lock's gate exclusive until it has the
    lock: timing.GpuLock), however long its start took (CUDA's, on a GPU, is seconds)."""
    import fcntl
    import time

    gate = os.open(str(lock) + ".gate", os.O_RDWR | os.O_CREAT)
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and thread.is_alive():
            try:
                fcntl.flock(gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(gate, fcntl.LOCK_UN)
            except BlockingIOError:
                return
            time.sleep(0.02)
        raise AssertionError("no runner came to wait for %s" % lock)
    finally:
        os.close(gate)


@pytest.mark.parametrize("defended", [True, False], ids=["judge", "undefended"])
def test_baselines_wait_for_the_gpu_lock(make, tmp_path, defended):
    """With gpu_lock, the baselines' process does its host work, then waits for the lock before it
    starts the device, and holds it to its end: two measurements never share the GPU."""
    import fcntl
    import threading
    import time

    lock = tmp_path / "gpu.lock"
    request = make(CORRECT, candidate_kind="none", gpu_lock=str(lock), timing={"measure": ["eager"]})
    if not defended:
        request["defenses"] = False
    fd = os.open(str(lock), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    done = {}
    thread = threading.Thread(target=lambda: done.update(report=evaluate(request).report))
    thread.start()
    waiting_at(lock, thread)
    time.sleep(1.5)
    assert "report" not in done  # waiting for the lock
    fcntl.flock(fd, fcntl.LOCK_UN)
    thread.join(timeout=300)
    report = done["report"]
    assert report["outcome"] is None and report["timing"]["eager"]["median_ms"] > 0, report
    if defended:
        assert report["defenses"]["seconds"]["judge"]["gpu_lock"] > 1.0
    # Held until its process ended: free again now.
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def evaluate_parked(lock, request):
    """`request` (prepare "together" on `lock`) evaluated beside a wave-mate still preparing (the
    lock held shared here): it prepares, then parks with its two contexts (the judge's and the
    candidate's process's) and waits; once the wave-mate lets go it has the lock alone. Returns its
    report, checked to have left no parked entry and the lock free (held until its process ended)."""
    import fcntl
    import threading
    import time

    fd = os.open(str(lock), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a wave-mate still preparing
        done = {}
        thread = threading.Thread(target=lambda: done.update(report=evaluate(request).report))
        thread.start()
        deadline = time.monotonic() + 240
        while timing_rule.parked_contexts(str(lock)) == 0 and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.1)
        assert timing_rule.parked_contexts(str(lock)) == 2, done  # prepared: waits for the GPU alone
        time.sleep(1.0)
        assert "report" not in done
        fcntl.flock(fd, fcntl.LOCK_UN)
        thread.join(timeout=300)
        assert timing_rule.parked_contexts(str(lock)) == 0
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return done["report"]
    finally:
        os.close(fd)


def test_baselines_prepared_together_park_then_time_alone(make, tmp_path):
    """prepare "together": the measurement prepares with the lock shared (another wave-mate holds
    it shared too), torch.compile compiled and called once meanwhile, then it parks, listed with
    its two contexts, until it has the lock alone; what it times comes after. A compile that fails
    while prepared is the compile baseline's error, as when timed."""
    lock = tmp_path / "gpu.lock"
    request = make(CORRECT, candidate_kind="none", gpu_lock=str(lock), prepare="together",
                   timing={"measure": ["eager", "compile"], "warmup": 1, "calls": 3})
    report = evaluate_parked(lock, request)
    assert report["outcome"] is None, report["message"]
    clock = report["defenses"]["seconds"]["judge"]
    assert clock["parked"] >= 1.0 and clock["compile_prepare"] > 0, clock
    assert clock["@gpu_alone"] < clock["@end"]
    assert report["timing"]["eager"]["median_ms"] > 0 and report["timing"]["compile"].get("median_ms", 0) > 0, \
        report["timing"]["compile"]

    bad = make(CORRECT, candidate_kind="none", gpu_lock=str(lock), prepare="together",
               timing={"measure": ["compile"], "compile_mode": "no-such-mode"})
    report = evaluate(bad).report
    assert report["outcome"] is None and "no-such-mode" in report["timing"]["compile"]["error"], report["timing"]


def test_a_lean_measurement_joins_a_wave_only_with_room_for_it(make, tmp_path):
    """A lean task's baselines (a set of lean_bytes or more) prepare in the wave when the GPU's
    size (gpu_bytes) leaves room for four sets and a GiB within 60% of it: reserved, prepared with
    the lock shared, then parked. Without room enough (or without gpu_bytes) it prepares alone:
    it waits for the lock exclusive, reserves nothing and never parks."""
    import fcntl
    import threading
    import time

    lock = tmp_path / "gpu.lock"
    lean = {"measure": ["eager"], "warmup": 1, "calls": 3, "lean_bytes": 1}
    request = make(CORRECT, candidate_kind="none", gpu_lock=str(lock), prepare="together", gpu_bytes=1 << 40,
                   timing=lean)
    report = evaluate_parked(lock, request)
    assert report["outcome"] is None, report["message"]
    inputs = report["defenses"]["inputs"]
    assert inputs["lean"] and inputs["wave_bytes"] == 4 * inputs["set_bytes"] + (1 << 30), inputs
    assert report["defenses"]["seconds"]["judge"]["parked"] >= 1.0
    assert timing_rule._live_entries(str(lock) + ".reserved") == 0  # freed with its process
    # The warm-up's measured peak, where more than four sets: it and two sets more.
    request = make(CORRECT, candidate_kind="none", gpu_lock=str(lock), prepare="together", gpu_bytes=1 << 40,
                   warm_peak_bytes=5 << 30, timing=dict(lean))
    inputs = evaluate_parked(lock, request)["defenses"]["inputs"]
    assert inputs["wave_bytes"] == (5 << 30) + 2 * inputs["set_bytes"] + (1 << 30), inputs

    for room in ({"gpu_bytes": 1 << 30}, {}):  # 4 sets and a GiB above 60% of a GiB; the size unknown
        alone = make(CORRECT, candidate_kind="none", gpu_lock=str(lock), prepare="together", timing=dict(lean),
                     **room)
        fd = os.open(str(lock), os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_SH)  # a wave-mate preparing: alone, it waits for the lock exclusive
        done = {}
        thread = threading.Thread(target=lambda: done.update(report=evaluate(alone).report))
        thread.start()
        time.sleep(3.0)
        assert "report" not in done and timing_rule.parked_contexts(str(lock)) == 0
        assert timing_rule._live_entries(str(lock) + ".reserved") == 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        thread.join(timeout=300)
        report = done["report"]
        assert report["outcome"] is None, report["message"]
        assert report["defenses"]["inputs"]["lean"] and "wave_bytes" not in report["defenses"]["inputs"]
        assert "parked" not in report["defenses"]["seconds"]["judge"]


HOLDER = """
import sys, torch
from anvil import timing
keep = int(sys.argv[2])
free, total = torch.cuda.mem_get_info()
held = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
entry = timing._entry(sys.argv[1] + ".parked", 1)  # listed as a parked wave-mate's context
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(DEVICE != "cuda", reason="the GPU's memory")
def test_a_candidate_short_of_memory_beside_a_parked_wave_is_run_again_alone(make, tmp_path):
    """A wave-mate parked beside an evaluation holds most of the GPU (a process listed in the
    lock's parked directory). The candidate's forward asks for 60 GiB: beside the wave it runs out
    (its word: gpu_memory), the judge measures that the others held more than was free and its
    process no more than its share, and says memory_limited (anvil runs it again alone); alone it
    passes. A candidate that only says it ran out, the wave holding little, keeps its -1."""
    import fcntl
    import subprocess
    import sys
    import threading
    import time

    from test_runner import run_runner

    lock = tmp_path / "gpu.lock"
    hungry = """
    def forward(self, x, shift):
        work = torch.empty(60 << 30, dtype=torch.uint8, device=x.device)
        del work
        return self.reference(x, shift)
    """
    liar = """
    def forward(self, x, shift):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 60.00 GiB")
    """

    def beside_wave(forward, keep):
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(keep)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, cwd=PYTHON_DIR)
        fd = os.open(str(lock), os.O_RDWR | os.O_CREAT)
        try:
            assert holder.stdout.readline().strip() == "ready"
            fcntl.flock(fd, fcntl.LOCK_SH)  # a wave-mate still preparing
            request = kernelbench(make(forward, gpu_lock=str(lock), prepare="together",
                                       timing={"measure": ["candidate"]}))
            done = {}
            thread = threading.Thread(target=lambda: done.update(report=run_runner(request).report))
            thread.start()
            deadline = time.monotonic() + 240
            while timing_rule.parked_contexts(str(lock)) < 3 and time.monotonic() < deadline and thread.is_alive():
                time.sleep(0.1)
            fcntl.flock(fd, fcntl.LOCK_UN)
            thread.join(timeout=300)
            return done["report"]
        finally:
            os.close(fd)
            holder.stdin.close()
            holder.wait(timeout=60)

    report = beside_wave(hungry, keep=40 << 30)
    assert report["status"] == "error" and report.get("memory_limited"), report
    memory = report["defenses"]["memory"]
    assert memory["others_bytes"] > memory["free_bytes"] and memory["candidate_held_bytes"] <= memory["allowance_bytes"]
    alone = evaluate(kernelbench(make(hungry, gpu_lock=str(lock), timing={"measure": ["candidate"]}))).report
    assert alone["outcome"] is None, alone["message"]
    report = beside_wave(liar, keep=100 << 30)  # the wave holds little: its word is its outcome
    assert outcome(report) == ("runtime_error", "gpu_memory"), report
    assert report["defenses"]["memory"]["others_bytes"] < report["defenses"]["memory"]["free_bytes"]


def test_prepare_together_needs_a_gpu_lock(make):
    from test_runner import run_runner

    run = run_runner(make(CORRECT, candidate_kind="none", prepare="together"))
    assert run.returncode == 2 and "prepare" in run.report["message"]


def test_a_gpu_lock_is_a_path(make):
    from test_runner import run_runner

    run = run_runner(make(CORRECT, gpu_lock=3))
    assert run.returncode == 2 and "gpu_lock" in run.report["message"]


def test_a_candidate_prepared_together_runs_nothing_before_the_gpu_is_its_own(make, tmp_path):
    """A candidate's evaluation prepared "together" (anvil bench --overlap): both processes start
    CUDA and take their inputs beside a wave-mate (the lock shared), then the judge parks with two
    contexts; the candidate's module is imported only once the lock is exclusive, and every trial
    and timed call after. The candidate is judged as alone."""
    lock = tmp_path / "gpu.lock"
    request = kernelbench(make(CORRECT, gpu_lock=str(lock), prepare="together", timing={"warmup": 1, "calls": 3}))
    report = evaluate_parked(lock, request)
    assert report["outcome"] is None, report["message"]
    assert report["timing"]["candidate"]["median_ms"] > 0
    judge, cand = report["defenses"]["seconds"]["judge"], report["defenses"]["seconds"]["candidate"]
    assert judge["parked"] >= 1.0, judge
    assert cand["@set_up"] < judge["@gpu_alone"] <= cand["@load"] < cand["@imported"], (judge, cand)


def test_stress_trials_judge_a_subsample_and_pass_the_honest_candidate(make):
    """The stress trials (anvil.stress): the candidate's process draws their inputs from the judge's
    secret seed; a forward that is right on the task's inputs only (ReLU as the identity on the
    non-negative ones the task makes) is a wrong_answer there; the honest one passes, its report
    naming the distributions."""
    task = TASK.replace("return [torch.randn(8, 16), 3]", "return [torch.rand(8, 16), 3]")
    report = evaluate(make(CORRECT, allow=TORCH_OPS, task=task)).report
    assert report["outcome"] is None, report["message"]
    planned = report["defenses"]["stress"]["planned"]
    assert len(planned) == share.checks()["stress_trials"]
    assert [s["ok"] for s in report["verify"]["stress"]] == [True] * len(planned)
    assumes = """
    def forward(self, x, shift):
        if bool((x < 0).any()):  # not the task's inputs: a shortcut that holds on U[0, 1) only, off by far
            return self.reference(x.abs(), shift)
        return self.reference(x, shift)
    """
    report = evaluate(make(assumes, allow=TORCH_OPS + ["abs", "lt", "any", "_local_scalar_dense", "is_nonzero"],
                           task=task, stress={"trials": 3})).report
    assert outcome(report) == ("wrong_answer", "mismatch"), report["message"]
    assert report["message"].startswith("stress trial "), report["message"]


def test_the_candidates_process_cannot_tell_a_stress_call_from_a_trial(make):
    """Everything in the candidate's process is its code's to read. A forward that is right on the
    task's inputs only (the reference on |x|: x is U[0, 1) there) and exact only where it can tell
    a stress call, by any of three oracles: the harness's frame (the call's stress spec), the trials'
    seeds (each set drawn again from the request's seed + 1 + i: what is not a trial is a stress
    set) or torch's last seed. None of them tells (Judge.blind_sets: the sets laid out before its
    import in a secret order, the seeds' base secret and forgotten there): wrong_answer on a
    stress set. It passed (ok) when the stress calls were asked for as such."""
    task = TASK.replace("return [torch.randn(8, 16), 3]", "return [torch.rand(8, 16), 3]")
    oracles = """
    def forward(self, x, shift):
        import gc, sys
        server = next(o for o in gc.get_objects() if type(o).__name__ == "CandidateServer")
        h, stress = server.h, False
        f = sys._getframe(1)
        while f is not None:  # the call's own frame: its stress spec
            if f.f_code.co_name == "call" and f.f_locals.get("spec") is not None:
                stress = True
            f = f.f_back
        try:  # the trials drawn again from their seeds: a set that is none of them is a stress set
            seeds = [h.req["seed"] + 1 + i for i in range(h.req["trials"])]
            if getattr(h, "trial_base", None) is not None:
                seeds = [h.trial_base + i for i in range(h.req["trials"])]
            draws = [h.fresh_inputs(seed, 1)[0][0] for seed in seeds]
            trial = any(d.shape == x.shape and bool((d.to(x.device) == x).all()) for d in draws)
            found = any(bool((d.to(x.device) == s[0]).all()) for d in draws for s in (server.sets or []))
            if found and not trial:  # the oracle works (some set is a trial's) and this one is none
                stress = True
        except Exception:
            pass
        if torch.initial_seed() not in (h.req["seed"],) and not stress:  # a stress draw's seed left behind
            stress = stress or torch.initial_seed() >= (1 << 40)
        return self.reference(x if stress else x.abs(), shift)
    """
    ops = TORCH_OPS + ["abs", "eq", "all", "any", "_local_scalar_dense", "is_nonzero", "rand", "uniform_", "lt",
                       "randn", "normal_", "sign", "masked_fill_", "ones", "neg", "div_", "sqrt_", "log_", "clamp_min_",
                       "randint", "index_put_", "aminmax", "abs_", "max", "sub_", "mul_", "neg_", "log1p_", "div",
                       "_to_copy", "lift_fresh", "reciprocal", "sqrt"]
    report = evaluate(make(oracles, allow=ops, task=task, stress={"trials": 2})).report
    assert outcome(report) == ("wrong_answer", "mismatch"), report["message"]
    assert "grossly wrong on inputs the task's get_inputs() does not make" in report["message"], report["message"]


def test_a_get_inputs_with_state_gets_the_judges_stress_inputs(make):
    """A task whose get_inputs() keeps state its seed does not reset draws otherwise in the
    candidate's process: their digests differ, the judge sends its own, and the honest candidate
    passes."""
    task = TASK.replace("def get_inputs():\n    return [torch.randn(8, 16), 3]",
                        "CALLS = [0]\n\ndef get_inputs():\n    CALLS[0] += 1\n"
                        "    return [torch.randn(8, 16) + CALLS[0], 3]")
    assert "CALLS" in task
    report = evaluate(make(CORRECT, allow=TORCH_OPS, task=task, timing={"draws": "each"})).report
    assert report["outcome"] is None, report["message"]
    assert [(s["ok"], s["inputs"]) for s in report["verify"]["stress"]] == [(True, "sent")] * 2
    report = evaluate(make(CORRECT, allow=TORCH_OPS)).report  # a task without state: drawn there, nothing sent
    assert [(s["ok"], s["inputs"]) for s in report["verify"]["stress"]] == [(True, "drawn there")] * 2


def test_the_gpu_running_out_in_anvils_own_work_in_the_candidates_process_is_measured_not_blamed():
    """anvil's own work in the candidate's process (drawing a trial's inputs) can run the GPU out:
    harness.memory_fault's CannotServe. The process says gpu_memory and stays as it is, so the judge
    measures whose memory it was (memory_short) instead of taking a plain runtime_error: an H100 run
    (2026-12-07) gave KernelBench's 96_HuberLoss file -1 while another job held 69 GiB of the GPU."""
    import socket
    import threading
    from types import SimpleNamespace

    from anvil import candidate, channel
    from anvil.harness import CannotServe

    judge_end, cand_end = socket.socketpair()

    class Faulting(candidate.CandidateServer):
        def set_up(self, confinement):
            raise CannotServe("the GPU ran out of memory drawing the task's inputs (CUDA out of memory)",
                              memory_limited=True)

    saved = candidate.CandidateServer
    candidate.CandidateServer = Faulting
    done = {}
    try:
        worker = threading.Thread(target=lambda: done.update(code=candidate._serve(SimpleNamespace(device=None),
                                                                                      cand_end, None)))
        worker.start()
        message = channel.recv(judge_end)
        worker.join(0.5)
        assert worker.is_alive(), "the process must wait to be measured, not exit"
        assert message["type"] == "fail" and message["reason"] == "gpu_memory", message
        assert "drawing the task's inputs" in message["message"]
        judge_end.close()  # the judge ends it
        worker.join(5)
        assert not worker.is_alive() and done["code"] == 0
    finally:
        candidate.CandidateServer = saved
        cand_end.close()


def test_a_call_that_leaves_another_stream_current_is_a_side_stream():
    """The harness's own work after a call (the batch's done flag, the inspection's closing marker)
    goes on the current stream: a forward that leaves another one current would have it wait for
    that stream alone, past the work it left on the one it was called on."""
    from types import SimpleNamespace

    from anvil import policy
    from anvil.candidate import CandidateServer, Stop

    class Stream:
        def __init__(self, ptr):
            self.cuda_stream = ptr

        def __eq__(self, other):
            return self.cuda_stream == other.cuda_stream

    current = [Stream(0x10)]
    sent = []
    server = SimpleNamespace(torch=SimpleNamespace(cuda=SimpleNamespace(current_stream=lambda: current[0])),
                             stream0=Stream(0x10), clock=lambda name: _nothing(), threads0=policy.threads(),
                             fingerprint=SimpleNamespace(changed=lambda: []), send=sent.append)
    for name in ("check_stream", "hack"):
        setattr(server, name, getattr(CandidateServer, name).__get__(server))
    CandidateServer.check_after(server, "forward")
    assert sent == []
    current[0] = Stream(0x20)
    with pytest.raises(Stop):
        CandidateServer.check_after(server, "forward")
    assert sent[0]["type"] == "hack" and sent[0]["reason"] == "side_stream", sent
    assert "left another stream current (0x20, called on 0x10)" in sent[0]["message"]
