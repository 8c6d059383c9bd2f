"""anvil.batch's pieces that need no second process: the judge's staging layout, the gate's
deadline and, on a GPU, the judge's clock with a second stream of this process standing in for the
candidate's (both non-blocking: a wait on the legacy default stream would hold up every other
stream of the process). Across two processes the clock is exercised by every defended evaluation
on a GPU (bench/hack_suite.py, bench/redteam_suite.py: gate_skip starts without waiting for the
gate, done_flag_early raises the done flag before its calls)."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from anvil import batch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="the judge's GPU clock needs a GPU")


def _calls():
    g = torch.Generator().manual_seed(3)
    return [[torch.randn(4, 5, generator=g), 3, torch.randn(7, generator=g).t()] for _ in range(3)]


def test_stage_rebuilds_the_calls_as_views_of_one_staging_copy():
    calls = _calls()
    originals = [[a.clone() if isinstance(a, torch.Tensor) else a for a in c] for c in calls]
    skeletons, regions, total = batch.lay_out(calls)
    del calls
    base = torch.empty(total, dtype=torch.uint8)
    staged, views = batch.stage(skeletons, regions, base)
    assert all(r[0] is None for r in regions)  # the drawn tensors are let go as they are copied
    for got, want in zip(staged, originals):
        assert torch.equal(got[0], want[0]) and got[1] == want[1] and torch.equal(got[2], want[2])
        assert got[0].untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert [id(v) for v, _r in views] == [id(a) for c in staged for a in c if isinstance(a, torch.Tensor)]


def test_the_gates_deadline_is_the_host_time_said_with_room_and_a_cap():
    assert batch.gate_ms({"map_ms": 0.5, "loop_ms": 10.0}, 2.0) == pytest.approx(1.25 * 20.5 + batch.GATE_SLACK_MS)
    assert batch.gate_ms({"map_ms": 1.0, "loop_ms": 1e5}, 1.0) == batch.MAX_GATE_MS
    for said in (None, {}, {"map_ms": "x", "loop_ms": 1}, {"map_ms": -1, "loop_ms": 1},
                 {"map_ms": math.nan, "loop_ms": 1}, {"map_ms": 1, "loop_ms": math.inf}):
        assert batch.gate_ms(said, 1.0) == batch.GATE_SLACK_MS, said


def _pair(mode):
    """gpu_clock_pair.py in a fresh interpreter (it forks before touching CUDA, as the judge does)."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, ".."))
    r = subprocess.run([sys.executable, os.path.join(here, "gpu_clock_pair.py"), mode], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@cuda
def test_the_gpu_clock_ends_after_its_read_of_the_outputs():
    """Across two processes: the calls wait for the gate, the clock runs from the inputs' arrival to
    the judge's read of every call's samples, which hold the answers for the inputs let in."""
    report = _pair("honest")
    assert "error" not in report and report["right"], report
    assert 0 < report["ms"] < 1000 and report["copy_ms"] > 0


@cuda
def test_a_done_flag_that_never_comes_ends_the_clock_with_an_error_and_no_stream_left_waiting():
    """The judge ends the candidate's process and releases its own waiting stream with a store from
    its host (no stream of its own, which could share a hardware queue with the waiting one)."""
    report = _pair("silent")
    assert "done flag" in report.get("error", ""), report
    assert report["release_s"] < 5


@cuda
def test_the_copy_rate_bills_a_slow_copy_in_to_the_candidate():
    rate = batch.CopyRate(torch.device("cuda"))
    nbytes = 256 << 20
    fair = rate.expected_ms(nbytes)
    assert fair > 0
    assert rate.excess_ms(nbytes, fair) == 0.0
    assert rate.excess_ms(nbytes, 3 * fair) == pytest.approx(3 * fair - batch.CopyRate.TOLERANCE * fair
                                                             - batch.CopyRate.FLOOR_MS)


def test_a_batch_is_sized_by_its_target_the_cap_and_the_room_it_may_reuse(monkeypatch):
    monkeypatch.setattr(batch, "free_memory", lambda device: 1000)
    cpu = torch.device("cpu")
    assert batch.calls_for(1.0, 0, cpu) == batch.TARGET_MS
    assert batch.calls_for(1.0, 0, cpu, target_ms=batch.EAGER_TARGET_MS) == batch.EAGER_TARGET_MS
    assert batch.calls_for(1e-6, 0, cpu) == batch.MAX_CALLS            # a tiny claim buys the cap, no more
    assert batch.calls_for(1e-6, 0, cpu, reference_ms=10.0) == batch.MAX_SPEEDUP  # as if 50x faster than the reference, no more
    assert batch.calls_for(1.0, 100, cpu) == 5                         # half of 1000 bytes free, 100 a call
    assert batch.calls_for(1.0, 100, cpu, held_bytes=1000) == 10       # the judge's room counts as free
    assert batch.calls_for(1.0, 10 ** 6, cpu) == 1                     # too large for two: one call


def test_a_malformed_handle_is_a_batch_error_not_a_crash():
    for handle in (None, 7, "zz", "ab" * 10):
        with pytest.raises(batch.BatchError, match="CUDA IPC handle"):
            batch.Mapped().base(handle)


def test_copies_pair_each_input_with_its_region_of_the_pool():
    """A lean batch copies from the judge's draws themselves (batch.copies_into): each input's bytes
    into its own region, every other byte of the pool left alone."""
    calls = [[torch.arange(6, dtype=torch.float32).reshape(2, 3), 7], [torch.ones(4, dtype=torch.int64)]]
    skeletons, regions, total = batch.lay_out(calls)
    pool = torch.full((total,), 0xFF, dtype=torch.uint8)
    for dst, src in batch.copies_into(pool, regions):
        dst.copy_(src)
    rebuilt = [batch.rebuild(s, lambda r: batch.region_tensor(pool, r)) for s in skeletons]
    assert torch.equal(rebuilt[0][0], calls[0][0]) and rebuilt[0][1] == 7
    assert torch.equal(rebuilt[1][0], calls[1][0])
