"""anvil.warm: torch.compile's caches warmed for a task (anvil baselines' phase one), called as
anvil calls it (the request's JSON in, the report out), on the CPU; ANVIL_TEST_DEVICE=cuda on a GPU."""
import json
import textwrap

from test_runner import DEVICE, STRICT, TASK


def warm_request(tmp_path, task=TASK):
    (tmp_path / "model.py").write_text(textwrap.dedent(task))
    (tmp_path / "candidate").mkdir()
    return {"protocol": "anvil.runner/1", "task_file": str(tmp_path / "model.py"),
            "candidate_dir": str(tmp_path / "candidate"), "candidate_kind": "none", "device": DEVICE, "seed": 7,
            "trials": 1, "tolerance": STRICT, "timing": {"measure": ["eager", "compile"]}, "defenses": False}


def test_a_warm_up_compiles_and_on_a_gpu_says_its_peak(tmp_path):
    """Both models called once on a set of inputs; on a GPU the allocator's peak (a lean task's
    room in a wave comes from it) holds at least the set, the weights and the output."""
    from anvil import warm

    report = warm.warm(json.dumps(warm_request(tmp_path)))
    assert report["status"] == "done", report
    assert report["seconds"]["compile"] > 0
    if DEVICE == "cuda":
        assert report["peak_bytes"] >= (8 * 16 + 16 * 16 + 16 + 8 * 16) * 4, report
    else:
        assert "peak_bytes" not in report


def test_a_task_that_cannot_run_is_an_error_and_not_memory_limited(tmp_path):
    from anvil import warm

    broken = TASK.replace("return self.lin(x) * self.scale + shift", "raise ValueError('nope')")
    report = warm.warm(json.dumps(warm_request(tmp_path, broken)))
    assert report["status"] == "error" and "nope" in report["message"] and not report["memory_limited"], report
