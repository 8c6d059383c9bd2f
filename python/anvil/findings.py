"""The defenses that read the evidence after the calls, as a registry of small checks run in
order (docs/anti-hacking.md's table of reasons). Each check takes the judge and the trace's
analysis and returns findings: (reason, model-readable message, evidence). The judge ranks them
by judge.REASONS and names the first.

The evidence here comes from the candidate's own process (its op recorder, its profiler trace):
it catches a candidate that does not hide what it does, and only ever hurts the candidate, since
the judge's clock and comparisons, not this evidence, decide time and correctness.
"""
from anvil import policy

ESCAPE_SLACK = 1.25      # kernel time per call may exceed the events' time by this factor ...
ESCAPE_FLOOR_MS = 0.005  # ... plus this, before the work is said to have escaped the timed region


def analysis(judge):
    """The profiler trace of the in-process timing, analysed (None without one)."""
    trace = judge.trace
    if trace is None or trace.get("profiler_error"):
        return None
    pol = judge.defenses["policy"]
    if judge.device.type != "cuda":
        return {"cpu_only": policy.analyze_trace([], trace.get("cpu_ops", []), set(), pol)}
    own = judge.own_names
    if own is None:  # no kernel list: every kernel that is not torch's counts as the candidate's
        own = {k.get("name", "") for k in trace.get("kernels", []) if not policy.is_torch_kernel(k.get("name", ""))}
    return policy.analyze_trace(trace.get("kernels", []), trace.get("cpu_ops", []), own, pol,
                                trace.get("marker_stream"), trace.get("calls", 1))


def torch_fallback(judge, a):
    if judge.defenses["policy"].get("torch_ops"):  # the protocol allows torch compute (kernelbench)
        return []
    ops = dict(judge.done_ops or {})
    work = (a or {}).get("cpu_only") or a
    if work is not None:
        for op, n in work["forbidden_ops"].items():
            ops[op] = ops.get(op, 0) + n
        judge.report["defenses"]["work"] = work if a and "cpu_only" not in a else {"forbidden_ops": work["forbidden_ops"]}
    if ops:
        return [("torch_fallback", judge._ops_message(ops, "timed calls"), {"ops": ops})]
    return []


def trace_complete(judge, a):
    # The profiler started before the inspected calls and failed to stop or be read after them:
    # only the candidate's code ran in between (torch.autograd._disable_profiler, say). Its evidence,
    # the work it claims as its own, is lost, and lost evidence earns nothing.
    error = (judge.trace or {}).get("profiler_error")
    if error:
        return [("harness_patched", "the profiler of the inspected calls did not stop as anvil stopped it (%s): the "
                 "trace of the candidate's work was lost; leave the profiler alone" % str(error)[:200], {})]
    if a is None or "cpu_only" in a:
        return []
    calls = judge.trace.get("calls", 0)
    if judge.trace.get("markers", calls) < calls:
        return [("harness_patched", "the profiler recorded %d of the %d inspected calls: the trace was tampered with" %
                 (judge.trace.get("markers", 0), calls), {})]
    if judge.trace.get("ranges", calls) != calls:
        return [("harness_patched", "the profiler recorded %d \"anvil::call\" ranges for %d inspected calls: the "
                 "candidate opened the harness's own ranges" % (judge.trace.get("ranges", 0), calls), {})]
    return []


def other_threads(judge, a):
    if a is None or "cpu_only" in a or not judge.trace.get("other_thread_kernels"):
        return []
    return [("threads", "%d GPU kernel(s) were launched from another host thread during the timed calls: launch from "
             "the calling thread, before forward returns" % judge.trace["other_thread_kernels"], {})]


def timing_escape(judge, a):
    if a is None or "cpu_only" in a:
        return []
    # the profiled calls' own event time too: the kernels were summed over them, not the timed calls
    # (a model whose work varies with the input set takes another slice of the rotation there)
    timed = (judge.report["timing"].get("candidate") or {}).get("median_ms")
    seen = [m for m in (timed, judge.trace.get("median_ms")) if isinstance(m, (int, float))]
    median = max(seen) if seen else None
    # Where its own kernels must do the work (cuda-agent: no side streams either, so its kernels run
    # one after another), the timed calls must take at least the GPU time the inspected calls showed:
    # a candidate that tells the profiled calls apart and does other, faster work when timed is paid
    # on work it never showed.
    if judge.defenses["policy"].get("own_work", True) and isinstance(timed, (int, float)):
        median = timed
    gpu_ms = a["total_us"] / 1e3
    if median is not None and gpu_ms > ESCAPE_SLACK * median + ESCAPE_FLOOR_MS:
        return [("timing_escape", "the candidate's kernels ran %.4g ms of GPU time per call but the timed region saw "
                 "%.4g ms: work escaped the timed region (another stream or thread, or work left running after "
                 "forward returned), or the timed calls did other work than the profiled ones" % (gpu_ms, median),
                 {"gpu_ms": gpu_ms})]
    return []


def side_stream(judge, a):
    if a is None or "cpu_only" in a or not a["side_stream_kernels"]:
        return []
    names = ", ".join(list(a["side_stream_kernels"])[:3])
    return [("side_stream", "kernels ran on a stream other than the current one and were not joined to it before "
             "forward returned (still running when the call's stream was done): %s. Launch on the current stream "
             "(anvil::stream()), or make it wait for the other stream's work before returning" % names, {})]


def proof_of_work(judge, a):
    if a is None or "cpu_only" in a:
        return []
    pol = judge.defenses["policy"]
    if not pol.get("own_work", True):  # the protocol asks no own kernels (kernelbench)
        return []
    if a["own_us"] + (a["library_us"] if pol.get("libraries") else 0) <= 0:
        return [("no_kernels", "the candidate's own kernels never ran during the timed calls", {})]
    if a["own_share"] is not None and a["own_share"] < pol["own_work_min"]:
        rest = ", ".join(k["name"][:60] for k in a["kernels"] if k["kind"] not in ("own", "fill"))[:300]
        return [("foreign_work", "the candidate's own kernels took %.0f%% of the GPU time (at least %.0f%% required); "
                 "the rest: %s" % (100 * a["own_share"], 100 * pol["own_work_min"], rest), {})]
    return []


def precision(judge, a):
    p = judge.precision
    if p and p.get("checked") and p.get("candidate_error") is not None and p["candidate_error"] > p["limit"]:
        return [("precision", "%s is %.3g away from a float64 reference (relative L2), the reference itself %.3g: the "
                 "candidate computes at a lower precision than the reference (TF32, fp16, bf16?); keep the reference's "
                 "precision" % (p["output"], p["candidate_error"], p["reference_error"]), {})]
    return []


def below_roofline(judge, a):
    """The speed-of-light floor, applied to the time anvil will believe: the judge's batch (per
    call), which no process can make faster than the device allows, and the claim."""
    r = judge.roofline
    cand = judge.report["timing"].get("candidate") or {}
    if not (r and r.get("bandwidth_bytes_per_s") and cand.get("median_ms") is not None):
        return []
    floor_s = max(r["bytes"] / r["bandwidth_bytes_per_s"], r["flops"] / r["flops_per_s"] if r.get("flops_per_s") else 0.0)
    r["floor_ms"] = floor_s * 1e3 / judge.defenses["roofline_slack"]
    judge.report["defenses"]["roofline"] = r
    fastest = min(x for x in (cand.get("median_ms"), cand.get("kernel_sum_ms")) if x is not None)
    if fastest < r["floor_ms"]:
        return [("below_roofline", "%.4g ms is below the speed-of-light floor of %.4g ms (%d bytes at %.3g GB/s, %d "
                 "flops at %.3g TFLOP/s): impossible, quarantined" % (
                     fastest, r["floor_ms"], r["bytes"], r["bandwidth_bytes_per_s"] / 1e9, r["flops"],
                     (r.get("flops_per_s") or 0) / 1e12), {})]
    return []


CHECKS = (torch_fallback, trace_complete, other_threads, timing_escape, side_stream, proof_of_work, precision,
          below_roofline)


def collect(judge):
    a = analysis(judge)
    found = []
    for check in CHECKS:
        found += check(judge, a)
    judge.report["defenses"]["timed_outputs_checked"] = judge.timed_checked
    return found
