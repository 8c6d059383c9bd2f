"""The runner driven as anvil drives it: JSON on stdin, the report read from a pipe on fd 3.

The requests name the CPU; ANVIL_TEST_DEVICE=cuda runs the same cases on a GPU."""
import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import PYTHON_DIR

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = scale

    def forward(self, x, shift):
        return self.lin(x) * self.scale + shift

def get_inputs():
    return [torch.randn(8, 16), 3]

def get_init_inputs():
    return [16]
"""

# ModelNew bodies: `HEAD` plus a forward. The runner does not police torch use, so these are torch.
HEAD = """
import sys
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = scale
        self.calls = 0

    def reference(self, x, shift):
        return torch.addmm(self.lin.bias, x, self.lin.weight.t()) * self.scale + shift
"""

CORRECT = HEAD + """
    def forward(self, x, shift):
        print("candidate chatter \\x00\\xff on stdout")
        print("and on stderr", file=sys.stderr)
        return self.reference(x, shift)
"""

STRICT = {"preset": "strict",
          "float32": {"atol": 1e-4, "rtol": 1e-4, "norm": 1e-5},
          "float16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-3},
          "bfloat16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-2},
          "float64": {"atol": 1e-7, "rtol": 1e-7, "norm": 1e-9}}
PAPER = {"preset": "paper", "float32": {"atol": 1e-2, "rtol": 1e-2, "norm": None}}
NUM = r"-?[0-9.]+(?:e[-+][0-9]+)?"
DEVICE = os.environ.get("ANVIL_TEST_DEVICE", "cpu")
needs_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="set ANVIL_TEST_DEVICE=cuda on a GPU machine")


class Run:
    def __init__(self, returncode, stdout, stderr, fd3):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.fd3 = fd3
        self.report = json.loads(fd3) if fd3.strip() else None


def run_runner(request, fd3=True, timeout=300, python_dir=PYTHON_DIR):
    """Start `python -m anvil.runner` with a pipe on fd 3, as anvil does; return a Run."""
    read_end, write_end = os.pipe()

    def child():
        if fd3:
            os.dup2(write_end, 3)  # dup2 clears close-on-exec: fd 3 survives the exec

    env = dict(os.environ, PYTHONPATH=python_dir, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "anvil.runner"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=child,
                            close_fds=False, env=env, text=True)
    os.close(write_end)
    chunks = []

    def drain():
        while True:
            data = os.read(read_end, 65536)
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        stdout, stderr = proc.communicate(json.dumps(request), timeout=timeout)
    finally:
        reader.join(timeout=30)
        os.close(read_end)
    fd3_text = b"".join(chunks).decode("utf-8")
    if fd3_text:
        assert fd3_text.endswith("\n") and fd3_text.count("\n") == 1, "one JSON line on fd 3: %r" % fd3_text
    return Run(proc.returncode, stdout, stderr, fd3_text)


@pytest.fixture
def make(tmp_path):
    """make(candidate_source, task_source=TASK, **request fields) -> request for a fresh pair."""
    counter = [0]

    def build(candidate, task=TASK, **fields):
        counter[0] += 1
        root = tmp_path / ("case%d" % counter[0])
        cand = root / "candidate"
        cand.mkdir(parents=True)
        (root / "model.py").write_text(textwrap.dedent(task))
        if candidate is not None:
            (cand / "model_new.py").write_text(textwrap.dedent(candidate))
        request = {"protocol": "anvil.runner/1", "task_file": str(root / "model.py"),
                   "candidate_dir": str(cand), "candidate_kind": "workdir", "device": DEVICE,
                   "seed": 1234, "trials": 5, "tolerance": STRICT,
                   "flags": {"allow_tf32": False, "cudnn_allow_tf32": False, "cudnn_benchmark": False,
                             "cudnn_deterministic": False},
                   "timing": {"measure": [], "warmup": 2, "calls": 6, "input_sets": 3,
                              "flush_l2": True, "kernel_sum": True, "compile_mode": "default"},
                   # These candidates are torch code: the undefended path. test_judge.py covers
                   # the defended one.
                   "defenses": False}
        for key, value in fields.items():
            if key == "timing":
                request["timing"] = dict(request["timing"], **value)
            else:
                request[key] = value
        return request

    return build


def evaluate(request, **kwargs):
    run = run_runner(request, **kwargs)
    assert run.returncode == 0, run.stderr
    assert run.report is not None, run.stderr
    assert run.report["protocol"] == "anvil.runner/1"
    assert run.report["status"] == "done"
    return run


def failed(request, outcome):
    run = evaluate(request)
    report = run.report
    assert report["outcome"] == outcome, report
    assert report["timing"] == {}
    return report


def test_correct_candidate(make):
    run = evaluate(make(CORRECT, timing={"measure": ["candidate", "eager"]}))
    report = run.report
    assert report["outcome"] is None and report["message"] == "" and report["detail"] == ""
    assert report["verify"] == {"trials": [{"seed": s, "ok": True, "report": ""} for s in range(1235, 1240)],
                                "passed": 5, "failed": 0}
    assert set(report["timing"]) == {"candidate", "eager"}
    for stats in report["timing"].values():
        assert len(stats["samples"]) == 6
        assert 0 < stats["min_ms"] <= stats["p25_ms"] <= stats["median_ms"] <= stats["p75_ms"] <= stats["max_ms"]
        assert stats["min_ms"] == min(stats["samples"]) and stats["max_ms"] == max(stats["samples"])
        if DEVICE == "cpu":
            assert stats["kernel_sum_ms"] is None
        else:
            assert 0 < stats["kernel_sum_ms"] < stats["max_ms"]
    import torch

    env = report["env"]
    assert env["torch"] == torch.__version__ and env["device_name"]
    if DEVICE == "cpu":
        assert env["capability"] is None and env["driver"] is None
    else:
        assert re.fullmatch(r"[0-9]+\.[0-9]+", env["capability"]) and env["driver"] and env["cuda"]
    assert set(report["seconds"]) == {"import", "verify", "timing", "main"}
    assert report["seconds"]["import"] > 0
    # The candidate's chatter stays on stdout/stderr; the report went to fd 3 only.
    assert "candidate chatter" in run.stdout and "and on stderr" in run.stderr
    assert "anvil.runner/1" not in run.stdout


def test_report_on_stdout_without_fd3(make):
    run = run_runner(make(CORRECT), fd3=False)
    assert run.returncode == 0 and run.fd3 == ""
    last = run.stdout.rstrip("\n").splitlines()[-1]
    report = json.loads(last)
    assert report["status"] == "done" and report["outcome"] is None
    assert report["verify"]["passed"] == 5


def test_zygote_refuses_to_serve_when_its_children_would_have_no_cuda():
    # torch.cuda.device_count() starts the driver without is_initialized() saying so, and every child
    # forked after it fails ("Cannot re-initialize CUDA in forked subprocess"): importing
    # torch._inductor in the zygote did, and every evaluation on the H100 was a task_error.
    code = ("import torch; from anvil import zygote; ok = zygote._children_have_cuda(torch); "
            "torch.cuda.device_count(); print(ok, zygote._children_have_cuda(torch))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=PYTHON_DIR))
    assert proc.returncode == 0, proc.stderr
    import torch

    if not hasattr(torch._C, "_cuda_isInBadFork"):
        pytest.skip("a torch without CUDA: no fork can be bad")
    assert proc.stdout.split() == ["True", "False"]


def test_report_to_a_regular_file_on_fd3(make, tmp_path):
    # anvil's zygote hands the runner a file, not a pipe, as fd 3.
    path = tmp_path / "report.json"
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    proc = subprocess.run([sys.executable, "-m", "anvil.runner"], input=json.dumps(make(CORRECT)),
                          capture_output=True, text=True, env=env, timeout=300, close_fds=False,
                          preexec_fn=lambda: os.dup2(fd, 3))
    os.close(fd)
    assert proc.returncode == 0, proc.stderr
    text = path.read_text()
    assert text.count("\n") == 1
    report = json.loads(text)
    assert report["outcome"] is None and report["verify"]["passed"] == 5
    assert "anvil.runner/1" not in proc.stdout


def test_wrong_math(make):
    wrong = HEAD + """
    def forward(self, x, shift):
        out = self.reference(x, shift)
        out[1, 2] += 0.5
        return out
"""
    report = failed(make(wrong), "wrong_answer")
    pattern = (r"trial 0 \(seed 1235\), output: 1 of 128 elements differ; first at index \(1, 2\): "
               r"got (NUM), expected (NUM); max abs error 0\.5 at \(1, 2\); max rel error (NUM); "
               r"tolerance atol=1e-4 rtol=1e-4 \(preset strict\)").replace("NUM", NUM)
    match = re.fullmatch(pattern, report["message"])
    assert match, report["message"]
    got, expected = float(match.group(1)), float(match.group(2))
    assert got - expected == pytest.approx(0.5, abs=2e-3)
    assert float(match.group(3)) == pytest.approx(0.5 / abs(expected), rel=2e-3)
    verify = report["verify"]
    assert verify["passed"] == 0 and verify["failed"] == 5
    assert [t["seed"] for t in verify["trials"]] == [1235, 1236, 1237, 1238, 1239]
    assert verify["trials"][3]["report"].startswith("trial 3 (seed 1238), output: 1 of 128 elements differ")
    assert report["detail"].count("\n") == 4  # the five trials' reports


def test_paper_preset_is_looser(make):
    off = HEAD + """
    def forward(self, x, shift):
        return self.reference(x, shift) + 5e-3
"""
    report = failed(make(off), "wrong_answer")
    assert report["message"].startswith("trial 0 (seed 1235), output: 128 of 128 elements differ")
    assert report["message"].endswith("tolerance atol=1e-4 rtol=1e-4 (preset strict)")
    report = evaluate(make(off, tolerance=PAPER)).report
    assert report["outcome"] is None and report["verify"]["passed"] == 5


def test_input_mutation(make):
    mutates = HEAD + """
    def forward(self, x, shift):
        out = self.reference(x, shift)
        x[0, :3] = 0.0
        return out
"""
    report = failed(make(mutates), "wrong_answer")
    assert report["message"] == "trial 0 (seed 1235): the candidate modified input 0 (3 of 128 elements changed)"


def test_candidate_raises(make):
    raises = HEAD + """
    def forward(self, x, shift):
        raise ValueError("kaboom in forward")
"""
    report = failed(make(raises), "runtime_error")
    assert report["message"] == "trial 0 (seed 1235): the candidate raised ValueError: kaboom in forward"
    assert 'model_new.py", line' in report["detail"]
    assert report["detail"].splitlines()[-1] == "ValueError: kaboom in forward"
    assert "anvil/runner.py" not in report["detail"]  # the runner's frames are trimmed
    assert report["verify"]["failed"] == 1 and report["verify"]["trials"][0]["ok"] is False


def test_an_error_raised_inside_anvil_ends_the_trace_at_the_candidates_line(make):
    """A load_inline build that fails raises from anvil's own frames; the detail (the message a
    model reads) ends at the candidate's line and the error (a compiler's diagnostics), with none of
    anvil's frames between them."""
    calls_anvil = """
import anvil.load_inline
module = anvil.load_inline.load_inline(name="no/such/name", cpp_sources=["int f();"])
""" + HEAD.replace("import sys", "")
    report = failed(make(calls_anvil + "\n    def forward(self, x, shift):\n        return x\n"), "load_error")
    lines = report["detail"].splitlines()
    at = max(i for i, line in enumerate(lines) if 'model_new.py", line' in line)
    assert "anvil/" not in "\n".join(lines[at:]), report["detail"]
    assert "load_inline(" in lines[at + 1], report["detail"]
    assert "RuntimeError: Error building extension 'no/such/name':" in lines[at:], report["detail"]
    assert "not a valid module name" in lines[-1], report["detail"]  # checked before the name reaches a path


def test_candidate_out_of_gpu_memory_says_so(make):
    oom = HEAD + """
    def forward(self, x, shift):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
"""
    report = failed(make(oom), "runtime_error")
    assert report["reason"] == "gpu_memory"
    assert report["message"] == ("trial 0 (seed 1235): the candidate raised OutOfMemoryError: CUDA out of memory. "
                                 "Tried to allocate 2.00 GiB")


def test_candidate_calls_exit(make):
    exits = HEAD + """
    def forward(self, x, shift):
        sys.exit(3)
"""
    report = failed(make(exits), "runtime_error")
    assert report["message"] == "trial 0 (seed 1235): the candidate called exit() (status 3)"
    at_import = "import sys\nsys.exit()\n"
    report = failed(make(at_import), "load_error")
    assert report["message"] == "importing model_new.py called exit()"


def test_candidate_fails_on_the_second_call(make):
    flaky = HEAD + """
    def forward(self, x, shift):
        self.calls += 1
        out = self.reference(x, shift)
        return out if self.calls % 2 else out * 2
"""
    report = failed(make(flaky), "wrong_answer")
    assert report["message"].startswith(
        "trial 0 (seed 1235), second call (after the reference), output: 128 of 128 elements differ")


def test_reused_output_buffer_passes(make):
    # A CUDA-graph-like candidate overwrites the same output buffer on every call: legitimate.
    reuses = HEAD + """
    def forward(self, x, shift):
        if not hasattr(self, "buf"):
            self.buf = torch.empty(x.shape[0], self.lin.weight.shape[0], device=x.device)
        self.buf.copy_(self.reference(x, shift))
        return self.buf
"""
    assert evaluate(make(reuses)).report["outcome"] is None


def test_output_filled_only_by_a_later_call_fails(make):
    # The first call's output is checked as it was when the call returned, not after the second.
    lazy = HEAD + """
    def forward(self, x, shift):
        self.calls += 1
        if not hasattr(self, "buf"):
            self.buf = torch.zeros(x.shape[0], self.lin.weight.shape[0], device=x.device)
        if self.calls % 2 == 0:
            self.buf.copy_(self.reference(x, shift))
        return self.buf
"""
    report = failed(make(lazy), "wrong_answer")
    assert report["message"].startswith("trial 0 (seed 1235), output: 128 of 128 elements differ; "
                                        "first at index (0, 0): got 0, expected ")


def test_structure_mismatch(make):
    tupled = HEAD + """
    def forward(self, x, shift):
        return (self.reference(x, shift),)
"""
    report = failed(make(tupled), "wrong_answer")
    assert report["message"] == "trial 0 (seed 1235), output: got a tuple of 1 items, expected a tensor"
    wrong_dtype = HEAD + """
    def forward(self, x, shift):
        return self.reference(x, shift).double()
"""
    report = failed(make(wrong_dtype), "wrong_answer")
    assert report["message"] == "trial 0 (seed 1235), output: dtype float64, expected float32"


def test_nan_in_candidate_output(make):
    nan = HEAD + """
    def forward(self, x, shift):
        out = self.reference(x, shift)
        out[0, 0] = float("nan")
        return out
"""
    report = failed(make(nan, tolerance=PAPER), "wrong_answer")
    assert report["message"].startswith("trial 0 (seed 1235), output: 1 of 128 elements differ; "
                                        "first at index (0, 0): got nan, expected ")
    assert "max abs error inf at (0, 0)" in report["message"]
    assert "the output holds 1 NaN and 0 Inf" in report["message"]


def test_the_constructor_is_called_as_each_protocol_calls_it(make):
    """Both protocols build ModelNew(*get_init_inputs()) (KernelBench's and CUDA-Agent's harnesses
    do): values it cannot bind are a load_error; more parameters with defaults are fine (public
    KernelBench generations add an eps); cuda-agent also wants Model's parameters first, by name."""
    def init(signature, name="n"):
        return CORRECT.replace("def __init__(self, n, scale=2.0):", "def __init__%s:" % signature).replace(
            "nn.Linear(n, n)", "nn.Linear(%s, %s)" % (name, name))

    kernelbench = {"name": "kernelbench", "torch_ops": True, "own_work": False, "weights": "by_name_or_seed"}
    cannot = init("(self, n, scale, bias)")
    for rules in ({}, {"rules": kernelbench}):
        report = failed(make(cannot, **rules), "load_error")
        assert report["message"].startswith("ModelNew.__init__(self, n, scale, bias) cannot be called with "
                                            "get_init_inputs() (1 value), as ModelNew(*get_init_inputs()) is: "), report
    renamed = init("(self, size, scale=2.0)", "size")
    report = failed(make(renamed), "load_error")
    assert report["message"] == ("ModelNew.__init__(self, size, scale=2.0) differs from Model.__init__(self, n, "
                                 "scale=2.0): it must take Model's parameters first, in order and by name (more, "
                                 "with defaults, may follow)")
    assert evaluate(make(renamed, rules=kernelbench)).report["outcome"] is None
    extra = init("(self, n, scale=2.0, eps: float = 1e-05)")
    for rules in ({}, {"rules": kernelbench}):
        assert evaluate(make(extra, **rules)).report["outcome"] is None


NO_ARGS_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(16, 16)]

def get_init_inputs():
    return []
"""


def test_a_modelnew_without_a_constructor_of_its_own_is_judged(make):
    """KernelBench's candidates for a Model that takes nothing often define no __init__: nn.Module's
    (self, *args, **kwargs) is called as Model's is, and the candidate is judged, not refused."""
    inherits = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
    run = evaluate(make(inherits, task=NO_ARGS_TASK))
    assert run.report["outcome"] is None, run.report
    wrong = inherits.replace("torch.relu(x)", "x")
    assert failed(make(wrong, task=NO_ARGS_TASK), "wrong_answer")["message"].startswith("trial 0")


def test_a_modelnew_with_a_constructor_for_a_model_without_one_is_judged(make):
    """The other way round (scripts/first_kernel.sh, 2026-12-05): Model has nn.Module's constructor,
    which takes anything; a ModelNew that defines __init__(self) to set its launch configuration is
    called with get_init_inputs() as Model is, and judged, not refused as a different signature. One
    that cannot take get_init_inputs() fails there, by name."""
    task = NO_ARGS_TASK.replace("    def __init__(self):\n        super().__init__()\n\n", "")
    assert "__init__" not in task
    own_init = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = 1

    def forward(self, x):
        return torch.relu(x)
"""
    run = evaluate(make(own_init, task=task))
    assert run.report["outcome"] is None, run.report
    needs_more = own_init.replace("def __init__(self):", "def __init__(self, width):")
    report = failed(make(needs_more, task=task), "load_error")
    assert "ModelNew(*get_init_inputs())" in report["message"] and "width" in report["message"], report["message"]


def test_parameter_names_differ(make):
    renamed = CORRECT.replace("self.lin", "self.fc")
    report = failed(make(renamed), "load_error")
    assert report["message"] == (
        "ModelNew's parameters and buffers differ from Model's: "
        "missing keys (in ModelNew, not in Model): fc.weight, fc.bias; "
        "unexpected keys (in Model, not in ModelNew): lin.weight, lin.bias")
    reshaped = CORRECT.replace("self.lin = nn.Linear(n, n)", "self.lin = nn.Linear(n, n + 1)")
    report = failed(make(reshaped), "load_error")
    assert report["message"] == (
        "ModelNew's parameters and buffers differ from Model's: shape mismatches: "
        "lin.weight (ModelNew [17, 16], Model [16, 16]), lin.bias (ModelNew [17], Model [16])")
    # Under the kernelbench rules both keep the weights the same seed gave them; the outputs decide.
    kernelbench = {"name": "kernelbench", "weights": "by_name_or_seed"}
    report = evaluate(make(renamed, rules=kernelbench)).report
    assert report["outcome"] is None and report["verify"]["weights"].startswith("seeded"), report["message"]
    report = failed(make(reshaped, rules=kernelbench), "wrong_answer")
    assert "(ModelNew kept the weights its constructor made" in report["message"]


def test_candidate_import_and_constructor_errors(make):
    report = failed(make("import cuda_extension\n"), "load_error")
    assert report["message"] == "importing model_new.py raised ModuleNotFoundError: No module named 'cuda_extension'"
    report = failed(make("x = 1\n"), "load_error")
    assert report["message"] == "model_new.py defines no class `ModelNew` (a torch.nn.Module subclass)"
    report = failed(make(None), "load_error")
    assert report["message"] == "no model_new.py in the candidate directory"
    report = failed(make("def broken(:\n"), "load_error")
    assert report["message"].startswith("model_new.py:1: syntax error")
    ctor = CORRECT.replace("self.calls = 0", "raise RuntimeError('no kernels built')")
    report = failed(make(ctor), "load_error")
    assert report["message"] == "ModelNew(*get_init_inputs()) raised RuntimeError: no kernels built"


def test_task_without_get_inputs(make):
    task = TASK.replace("def get_inputs():", "def get_inputs_renamed():")
    report = failed(make(CORRECT, task=task), "task_error")
    assert report["message"].endswith(": no function `get_inputs` defined")


def test_non_deterministic_reference(make):
    task = TASK.replace("return self.lin(x) * self.scale + shift",
                        "return self.lin(x) * self.scale + shift + torch.rand_like(x)")
    report = failed(make(CORRECT, task=task), "task_error")
    assert report["message"].startswith(
        "the reference is non-deterministic: two runs on the inputs of seed 1235 differ: output: ")
    assert report["verify"]["trials"] == []


def test_reference_with_nan(make):
    task = TASK.replace("return self.lin(x) * self.scale + shift", "return torch.log(x)")
    report = failed(make(CORRECT, task=task), "task_error")
    assert report["message"] == "the reference output holds NaN (inputs of seed 1235)"


def test_non_tensor_inputs_pass_through(make):
    checks = HEAD + """
    def forward(self, x, shift):
        assert type(shift) is int and shift == 3, shift
        return self.reference(x, shift)
"""
    assert evaluate(make(checks)).report["outcome"] is None


def test_candidate_fails_while_timing(make):
    late = HEAD + """
    def forward(self, x, shift):
        self.calls += 1
        if self.calls > 10:
            raise RuntimeError("out of luck")
        return self.reference(x, shift)
"""
    report = evaluate(make(late, timing={"measure": ["eager", "candidate"]})).report
    assert report["outcome"] == "runtime_error"
    assert report["message"] == "while timing: the candidate raised RuntimeError: out of luck"
    assert report["verify"]["passed"] == 5
    assert set(report["timing"]) == {"eager"}  # what was measured before


def test_file_candidate_kind(make):
    report = evaluate(make(CORRECT, candidate_kind="file")).report
    assert report["outcome"] is None


def test_compile_mode_error_is_reported(make):
    report = evaluate(make(CORRECT, timing={"measure": ["compile"], "compile_mode": "no-such-mode"})).report
    assert report["outcome"] is None
    assert set(report["timing"]) == {"compile"}
    assert report["timing"]["compile"]["error"].startswith(
        "torch.compile(Model, mode='no-such-mode') raised RuntimeError: Unrecognized mode=no-such-mode")


def test_compile_timing_on_cpu(make):
    report = evaluate(make(CORRECT, timing={"measure": ["compile"], "warmup": 1, "calls": 3})).report
    assert report["outcome"] is None
    compiled = report["timing"]["compile"]
    # Inductor needs a C++ compiler on the CPU; without one the error is reported, not raised.
    if "error" in compiled:
        assert compiled["error"].startswith("torch.compile(Model) raised ")
    else:
        assert len(compiled["samples"]) == 3 and compiled["median_ms"] > 0


@pytest.mark.parametrize("request_text, message", [
    ("not json", "bad request: the request is not JSON"),
    (json.dumps({"protocol": "anvil.runner/0"}), "bad request: protocol 'anvil.runner/0', expected 'anvil.runner/1'"),
])
def test_bad_request(request_text, message):
    read_end, write_end = os.pipe()
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    proc = subprocess.Popen([sys.executable, "-m", "anvil.runner"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=False, env=env,
                            preexec_fn=lambda: os.dup2(write_end, 3), text=True)
    os.close(write_end)
    proc.communicate(request_text, timeout=120)
    with os.fdopen(read_end) as f:
        report = json.loads(f.read())
    assert proc.returncode == 2
    assert report["status"] == "error" and report["outcome"] is None
    assert report["message"].startswith(message)


def test_bad_request_fields(make):
    request = make(CORRECT, trials=0)
    run = run_runner(request)
    assert run.returncode == 2 and run.report["status"] == "error"
    assert run.report["message"] == "bad request: trials: an integer >= 1 is required"
    run = run_runner(make(CORRECT, timing={"measure": ["candidate", "magic"]}))
    assert run.returncode == 2
    assert run.report["message"] == "bad request: timing.measure: a list of candidate, eager, compile is required"


def test_missing_cuda_is_an_error_not_an_outcome(make):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run = run_runner(make(CORRECT, device="cuda"))
    assert run.returncode == 2 and run.report["status"] == "error"
    assert run.report["message"].startswith("bad request: device cuda: CUDA is not available")


@needs_cuda
def test_cuda_error_in_candidate(make):
    # A device-side assert poisons the CUDA context; the report must still come out.
    oob = HEAD + """
    def forward(self, x, shift):
        return x[torch.tensor([10 ** 9], device=x.device)]
"""
    report = failed(make(oob), "runtime_error")
    assert report["message"].startswith("trial 0 (seed 1235): the candidate raised ")
    assert "device-side assert" in report["message"] or "device-side assert" in report["detail"]


@needs_cuda
def test_gpu_timing_with_compile_and_flags(make):
    # The candidate computes in full fp32 but leaves TF32 on: were the flags not pinned again
    # before the reference, the reference would run in TF32 and miss by ~1e-3 (seen on an H100).
    flips = HEAD + """
    def forward(self, x, shift):
        torch.backends.cuda.matmul.allow_tf32 = False
        out = self.reference(x, shift)
        torch.backends.cuda.matmul.allow_tf32 = True
        return out
"""
    report = evaluate(make(flips, timing={"measure": ["candidate", "eager", "compile"], "calls": 10})).report
    assert report["outcome"] is None, report["message"]
    for name in ("candidate", "eager", "compile"):
        stats = report["timing"][name]
        assert "error" not in stats, stats
        assert len(stats["samples"]) == 10 and stats["kernel_sum_ms"] > 0


@needs_cuda
def test_baselines_profiled_only_when_asked(make):
    # baseline_kernel_sum off (anvil's request when the reward compares events): the baselines make
    # no profiled pass and report no kernel sum; the candidate's is still measured.
    timing = {"measure": ["candidate", "eager", "compile"], "calls": 10, "baseline_kernel_sum": False}
    report = evaluate(make(CORRECT, timing=timing)).report
    assert report["outcome"] is None, report["message"]
    assert report["timing"]["candidate"]["kernel_sum_ms"] > 0
    for name in ("eager", "compile"):
        assert report["timing"][name]["kernel_sum_ms"] is None, report["timing"][name]
        assert "kernel_sum_error" not in report["timing"][name]


def test_import_is_light():
    code = "import sys, anvil.runner; assert 'torch' not in sys.modules, 'torch imported'"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_baselines_alone_without_defenses(make):
    """candidate_kind "none", undefended: eager (and compile) timed, nothing imported or verified."""
    run = evaluate(make('raise SystemExit("imported")', candidate_kind="none",
                        timing={"measure": ["eager"]}))
    report = run.report
    assert report["outcome"] is None and set(report["timing"]) == {"eager"}
    assert report["timing"]["eager"]["median_ms"] > 0
    assert report["verify"] == {"trials": [], "passed": 0, "failed": 0}
