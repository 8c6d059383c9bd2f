"""The trace checks of anvil.findings on a judge's trace alone (what the candidate's process sent)."""
from types import SimpleNamespace

from anvil import findings


def _judge(trace, median_ms=1.0, own_work=False):
    return SimpleNamespace(trace=trace, report={"timing": {"candidate": {"median_ms": median_ms}}},
                           defenses={"policy": {"own_work": own_work}})


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


def test_where_its_own_kernels_must_work_the_timed_calls_must_take_the_work_the_profiled_ones_showed():
    """cuda-agent (own work, no side streams): a candidate that tells the profiled calls apart
    (torch._C._autograd._profiler_enabled()) and runs its own 2 ms kernel there but torch's 1 ms
    path when timed is paid on work it never showed: the timed median alone is the bound."""
    a = {"total_us": 2_000.0}
    profiled_slow = {"median_ms": 2.1}  # the inspected calls' own time holds the kernels
    assert findings.timing_escape(_judge(profiled_slow, median_ms=1.0), a) == []  # kernelbench: as before
    found = findings.timing_escape(_judge(profiled_slow, median_ms=1.0, own_work=True), a)
    assert [f[0] for f in found] == ["timing_escape"] and "other work than the profiled ones" in found[0][1]
    assert findings.timing_escape(_judge(profiled_slow, median_ms=1.9, own_work=True), a) == []  # within 1.25x


def test_a_profiler_stopped_by_the_candidate_is_lost_evidence_not_a_pass():
    """torch.autograd._disable_profiler() called inside an inspected call: anvil's own stop then
    fails (profiler_error) and no trace check could run; before, that passed every one of them."""
    found = findings.trace_complete(_judge({"profiler_error": "RuntimeError: Can't disable Kineto profiler when "
                                                              "it's not running"}), None)
    assert [f[0] for f in found] == ["harness_patched"] and "Kineto" in found[0][1]


def docs_reasons():
    """The reasons of docs/anti-hacking.md's table, in its order."""
    import os
    import re

    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "docs", "anti-hacking.md")
    text = open(docs).read()
    table = text[text.index("| reason | evidence |"):]
    table = table[:table.index("\n\n")]
    return re.findall(r"^\| `(\w+)` \|", table, re.M)


def test_the_judge_ranks_the_reasons_as_docs_anti_hacking_md_lists_them():
    """The first reason found names the verdict: judge.REASONS is that rank, and the documented
    table lists the same reasons in the same order (anvil's own timing_forged, decided after the
    runner, last)."""
    from anvil import judge

    assert docs_reasons() == list(judge.REASONS) + ["timing_forged"]


def test_every_check_of_the_registry_yields_only_ranked_reasons():
    """Each check in findings.CHECKS is named after, or yields, reasons of judge.REASONS: a check
    added without a rank would sort last and could never name a verdict before a weaker one."""
    import inspect
    import re

    from anvil import judge

    for check in findings.CHECKS:
        said = set(re.findall(r'[\[(]\("(\w+)",', inspect.getsource(check)))
        assert said, check.__name__
        assert said <= set(judge.REASONS), (check.__name__, said - set(judge.REASONS))
