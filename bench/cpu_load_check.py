#!/usr/bin/env python3
"""What a loaded CPU does to the figures the judge takes (src/anvil/env/reward.h: why a claim the
judge's clock cannot back is a verdict of forgery on a GPU and only uncredited on a CPU).

    python3 bench/cpu_load_check.py [--runs N] [--busy K] [--size ROWSxCOLS] [--out FILE.json]

Evaluates the honest CPU candidate of examples/candidates/01_elementwise_chain on a size of its
task (by default 32 x 512, the size whose evaluations CI saw flagged) N times on a quiet machine, then N
times while K busy processes (each a Python loop) share the cores, every run with fresh baselines,
3 timed calls and 1 warm-up (CI's settings). First, the task's forward in plain torch with 1 and
2 intra-op threads, quiet and loaded (why anvil runs torch with one thread on the CPU). For each run it records the candidate's claim, the
judge's batches, eager's samples, the bound and its floor (reward.h), the outcome and reward; and
per phase the largest floor / claim (a forgery verdict takes more than 10) and eager's spread; and
how long eager's timed calls and batch waited for a CPU, and what share of their wall time
(baselines.h: above both MAX_RUN_QUEUE_SHARE and MIN_RUN_QUEUE_MS the baseline is not kept), with
how many of the phase's baselines would be kept.
Writes the JSON (with the machine's fingerprint) to --out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import common

ROOT = common.ROOT
MAX_RUN_QUEUE_SHARE, MIN_RUN_QUEUE_MS = 0.10, 5.0  # kMaxRunQueueShare, kMinRunQueueMs: src/anvil/env/baselines.h


def loaded(share, ms):
    """baselines.h's rule: a baseline whose threads waited this long is not kept."""
    return share is not None and ms is not None and share > MAX_RUN_QUEUE_SHARE and ms > MIN_RUN_QUEUE_MS


def task_file(dir_, rows=32, cols=512):
    text = open(os.path.join(ROOT, "examples", "tasks", "01_elementwise_chain.py")).read()
    for a, b in (("ROWS = 4096", "ROWS = %d" % rows), ("COLS = 4096", "COLS = %d" % cols), ("SCALE = 1.5", "SCALE = 2.0")):
        text = text.replace(a, b)
    path = os.path.join(dir_, "chain_%dx%d.py" % (rows, cols))
    with open(path, "w") as f:
        f.write(text)
    return path


def one(task, candidate):
    cmd = [common.ANVIL, "eval", "--task", task, "--candidate", candidate, "--device", "cpu", "--compile-mode", "none",
           "--calls", "3", "--warmup", "1", "--input-sets", "2", "--trials", "2", "--no-baseline-cache", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        r = json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stdout + p.stderr)[-500:]}
    t = r.get("timing") or {}
    cand, eager, bound = t.get("candidate") or {}, t.get("eager") or {}, t.get("bound") or {}
    ev = (r.get("hack") or {}).get("evidence") or {}
    claimed = bound.get("claimed_ms") or ev.get("claimed_ms")
    floor = bound.get("floor_ms") or ev.get("floor_ms")
    if floor is None and bound.get("vouched_ms") and eager.get("min_ms") and t.get("eager_ms"):
        floor = bound["vouched_ms"] * min(1.0, eager["min_ms"] / t["eager_ms"])
    return {"outcome": r.get("outcome"), "reason": r.get("reason"), "reward": r.get("reward"),
            "message": None if r.get("outcome") == "ok" else (r.get("message") or "")[:600],
            "claimed_ms": claimed, "vouched_ms": bound.get("vouched_ms") or ev.get("vouched_ms"), "floor_ms": floor,
            "unvouched": bool(bound.get("unvouched")),
            "floor_over_claim": round(floor / claimed, 3) if floor and claimed else None,
            "candidate_timed_batches": (cand.get("batch") or {}).get("timed_batches") or ev.get("candidate_timed_batches"),
            "eager_batch_per_call_ms": (eager.get("batch") or {}).get("per_call_ms") or ev.get("eager_batch_per_call_ms"),
            "eager_median_ms": eager.get("median_ms"), "eager_samples": eager.get("samples"), "candidate_samples": cand.get("samples"),
            # baselines.h: a baseline whose threads waited for a CPU more than this share is not kept
            "eager_run_queue_share": (eager.get("load") or {}).get("run_queue_share"),
            "eager_batch_run_queue_share": (eager.get("batch") or {}).get("run_queue_share"),
            "eager_run_queue_ms": (eager.get("load") or {}).get("run_queue_ms"),
            "eager_batch_run_queue_ms": (eager.get("batch") or {}).get("run_queue_ms")}


GELU = """
import sys, time, torch, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
x, b = torch.randn(32, 512), torch.randn(512)
f = lambda: torch.clamp(F.gelu(x * 2.0 + b), -0.1, 2.0)
for _ in range(50):
    f()
ts = []
for _ in range(200):
    t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1e3)
ts.sort()
print(ts[100], ts[180], ts[-1])
"""


def torch_threads(busy):
    """The task's forward in plain torch (32 x 512), 200 calls, with 1 and 2 intra-op threads."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        out = {}
        for n in (1, 2):
            p = subprocess.run([sys.executable, "-c", GELU, str(n)], capture_output=True, text=True, timeout=300)
            med, p90, mx = (float(v) for v in p.stdout.split())
            out["%d_thread%s" % (n, "s" if n > 1 else "")] = {"median_ms": round(med, 4), "p90_ms": round(p90, 4),
                                                              "max_ms": round(mx, 4)}
        return out
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def phase(name, runs, task, candidate, busy):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        out = []
        for i in range(runs):
            out.append(one(task, candidate))
            o = out[-1]
            print("  %-5s %2d  %-15s reward %-4s claim %-9s floor %-9s floor/claim %-6s run queue: calls %s batch %s" % (
                name, i, o.get("outcome"), o.get("reward"), o.get("claimed_ms"), o.get("floor_ms") and
                round(o["floor_ms"], 4), o.get("floor_over_claim"),
                "%s (%s ms)" % (o.get("eager_run_queue_share"), o.get("eager_run_queue_ms")),
                "%s (%s ms)" % (o.get("eager_batch_run_queue_share"), o.get("eager_batch_run_queue_ms"))), flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    eager = [s for o in out for s in (o.get("eager_samples") or [])]
    ratios = [o["floor_over_claim"] for o in out if o.get("floor_over_claim")]
    medians = [o["eager_median_ms"] for o in out if o.get("eager_median_ms")]
    return {"busy_processes": busy, "runs": out,
            "outcomes": {k: sum(1 for o in out if o.get("outcome") == k) for k in {o.get("outcome") for o in out}},
            "unvouched": sum(1 for o in out if o.get("unvouched")),
            "max_floor_over_claim": max(ratios) if ratios else None,
            "baselines_kept": sum(1 for o in out if not loaded(o.get("eager_run_queue_share"), o.get("eager_run_queue_ms"))
                                  and not loaded(o.get("eager_batch_run_queue_share"), o.get("eager_batch_run_queue_ms"))),
            "eager_median_ms": sorted(medians)[len(medians) // 2] if medians else None,
            "eager_ms_min": min(eager) if eager else None, "eager_ms_max": max(eager) if eager else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--size", default="32x512", help="the task's ROWS x COLS (CI's size: 32x512)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="anvil-cpu-load-") as d:
        rows, cols = (int(x) for x in a.size.split("x"))
        task = task_file(d, rows, cols)
        candidate = os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")
        result = {"fingerprint": common.fingerprint(), "task": "01_elementwise_chain at %d x %d" % (rows, cols),
                  "torch_threads": {"quiet": torch_threads(0), "loaded": torch_threads(a.busy)},
                  "settings": "--device cpu --calls 3 --warmup 1 --input-sets 2 --trials 2 --no-baseline-cache",
                  "quiet": phase("quiet", a.runs, task, candidate, 0),
                  "loaded": phase("busy", a.runs, task, candidate, a.busy)}
    for name, t in result["torch_threads"].items():
        print("plain torch, %-6s %s" % (name, json.dumps(t)))
    for name in ("quiet", "loaded"):
        p = result[name]
        print("%-6s outcomes %s, unvouched %d, largest floor/claim %s, eager's calls %s..%s ms (median of medians %s), "
              "baselines kept %d of %d" % (name, p["outcomes"], p["unvouched"], p["max_floor_over_claim"], p["eager_ms_min"],
                                           p["eager_ms_max"], p["eager_median_ms"], p["baselines_kept"], len(p["runs"])))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
