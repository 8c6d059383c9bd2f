"""The trace checks of anvil.findings on a judge's trace alone (what the candidate's process sent)."""
from types import SimpleNamespace

from anvil import findings


def _judge(trace, median_ms=1.0):
    return SimpleNamespace(trace=trace, report={"timing": {"candidate": {"median_ms": median_ms}}})


def test_a_trace_with_more_call_ranges_than_calls_is_tampered_with():
    whole = {"calls": 10, "markers": 10, "ranges": 10}
    assert findings.trace_complete(_judge(whole), {}) == []
    found = findings.trace_complete(_judge(dict(whole, ranges=11)), {})
    assert [f[0] for f in found] == ["harness_patched"] and "11" in found[0][1]
    assert [f[0] for f in findings.trace_complete(_judge(dict(whole, markers=9)), {})] == ["harness_patched"]


def test_timing_escape_compares_with_the_larger_median_of_timed_and_inspected_calls():
    a = {"total_us": 2_000.0}  # 2 ms of kernels per inspected call
    assert [f[0] for f in findings.timing_escape(_judge({}, median_ms=1.0), a)] == ["timing_escape"]
    assert findings.timing_escape(_judge({"median_ms": 1.9}, median_ms=1.0), a) == []
    assert findings.timing_escape(_judge({"median_ms": None}, median_ms=1.9), a) == []
