"""KernelBench's few-shot examples and adversarial unit-test kernels on the CPU (issue 17, item 6):
anvil's own CPU renditions of them (examples/kernelbench/cpu/, nothing of KernelBench copied), each
judged by `anvil eval --device cpu` under both protocols with every defense on, against the outcome
bench/kernelbench_check.py expects of KernelBench's originals on a GPU:

- add, fuse_gelu, tiled_matmul, flash_attn (honest, all the work their own): ok under both;
- mnist (replaces only the max-pool, torch does the rest): hack_suspected / torch_fallback under
  cuda-agent, ok under kernelbench;
- result_reuse (returns torch::empty unwritten): wrong_answer or hack_suspected under both (on the
  CPU: wrong_answer / unwritten_output, the sentinel in fresh memory seen);
- zero_out (zeroes its inputs, returns zeros): wrong_answer / input_mutated under both.

Left out: non_default_stream (unit_tests/test_kernels/non_default_stream_kernel.py: cuBLAS on a
CUDA stream of its own, never joined to the current one, so a clock on the current stream misses
its work). A CPU has no streams, so it has no CPU rendition; bench/kernelbench_check.py judges it
on a GPU. Every other case tells the same on the CPU as on the GPU.

Cost on a 2-core machine (2026-11-27): 12-20 s with the build cache warm (1-6 s an evaluation);
3 min 15 s with it empty, as on a clean clone: the first evaluation of each candidate builds its
extension inside the judge (about 12 s for the unit), and one precompiled torch/extension.h (about
42 s) serves every load_inline name (it was one a name, 7 min 10 s for this module, until the
module's name left the header's flags: BuildTest.LoadInlineNamesShareOnePrecompiledHeader).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
FILES = os.path.join(ROOT, "examples", "kernelbench", "cpu")

pytestmark = pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL)

PROTOCOLS = ("cuda-agent", "kernelbench")
# An expectation: (outcomes, reasons or None for any); the same shape as bench/kernelbench_check.py's.
OK = (["ok"], None)
# name -> (problem, candidate, {protocol: expectation})
CASES = {
    "add": ("add_model.py", "add_model_new.py", {"cuda-agent": OK, "kernelbench": OK}),
    "fuse_gelu": ("fuse_gelu_model.py", "fuse_gelu_model_new.py", {"cuda-agent": OK, "kernelbench": OK}),
    "tiled_matmul": ("tiled_matmul_model.py", "tiled_matmul_model_new.py", {"cuda-agent": OK, "kernelbench": OK}),
    "flash_attn": ("flash_attn_model.py", "flash_attn_model_new.py", {"cuda-agent": OK, "kernelbench": OK}),
    # only the max-pool is its own: torch's convolutions, linears and log-softmax, which CUDA-Agent's rules forbid
    "mnist": ("mnist_model.py", "mnist_model_new.py",
              {"cuda-agent": (["hack_suspected"], ["torch_fallback"]), "kernelbench": OK}),
    # torch::empty returned unwritten: whatever the allocator hands back must never pass
    "result_reuse": ("square_matmul_model.py", "result_reuse_model_new.py",
                     {p: (["wrong_answer", "hack_suspected"], None) for p in PROTOCOLS}),
    "zero_out": ("square_matmul_model.py", "zero_out_model_new.py",
                 {p: (["wrong_answer"], ["input_mutated"]) for p in PROTOCOLS}),
}


def evaluate(problem, candidate, protocol):
    """The JSON result of one `anvil eval` (its exit status must be 0: the candidate was judged).
    No torch.compile baseline: on the CPU it would build Inductor's C++ for every problem, and the
    outcome does not depend on it."""
    env = dict(os.environ, ANVIL_PYTHON=os.environ.get("ANVIL_PYTHON") or sys.executable)
    proc = subprocess.run([ANVIL, "eval", "--json", "--protocol", protocol, "--device", "cpu", "--compile-mode", "none",
                           "--task", os.path.join(FILES, problem), "--candidate", os.path.join(FILES, candidate)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, "anvil eval exited %d:\n%s\n%s" % (proc.returncode, proc.stdout[-2000:],
                                                                     proc.stderr[-2000:])
    return json.loads(proc.stdout)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", list(CASES))
def test_each_file_gets_its_expected_outcome(name, protocol):
    problem, candidate, expected = CASES[name]
    outcomes, reasons = expected[protocol]
    result = evaluate(problem, candidate, protocol)
    got = "%s/%s (reward %s): %s\n%s" % (result.get("outcome"), result.get("reason"), result.get("reward"),
                                         (result.get("message") or "")[:1500],
                                         (result.get("output_tail") or "")[-1500:])
    assert result["protocol"]["name"] == protocol
    assert result["candidate"]["kind"] == "file" and result["candidate"]["device"] == "cpu"
    assert result["outcome"] in outcomes, "expected %s, got %s" % ("|".join(outcomes), got)
    if reasons is not None:
        assert result.get("reason") in reasons, "expected reason %s, got %s" % ("|".join(reasons), got)
    assert result["correct"] == (result["outcome"] == "ok")
    assert (result["reward"] >= 1) if result["outcome"] == "ok" else (result["reward"] == -1), got
