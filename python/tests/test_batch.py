"""anvil.batch's pieces that need no second process: the judge's staging layout and the gate's
deadline. The gate itself is exercised by every defended evaluation on a GPU (bench/hack_suite.py,
bench/redteam_suite.py, whose gate_skip attack does not wait for it); a one-process version of it
(two streams, one waiting on the flag the other sets) hung on the H100, cause not found."""
import math

import pytest
import torch

from anvil import batch


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
