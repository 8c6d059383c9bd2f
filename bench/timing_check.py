#!/usr/bin/env python3
"""How sound a benchmark run's timings are, from its per-task records (docs/bench.md).

    python3 bench/timing_check.py RUN [RUN_B]

RUN is an `anvil bench` run directory, a records.tgz that gpu_bench_check.sh keeps, or the log of a
run (its per-task lines: speedups and rewards only, no timing details). For each
timed model (candidate, eager, compile) it prints the event median over the profiler's kernel sum
(near 1 when the events time the GPU's work; far above 1 when host time leaks into the samples)
and the late calls (timed calls whose host side outran the GPU sleep). With RUN_B (the same
solutions timed again: another run, another machine) it prints how far the speedups moved,
|log(B/A)|, and the tasks whose reward milestones differ. Standard library only.
"""
import glob
import io
import json
import math
import os
import re
import statistics
import sys
import tarfile


def records(path):
    """{level/stem: record} of a run directory or a records.tgz."""
    out = {}
    if path.endswith(".log"):
        line = re.compile(r"\[\d+/\d+\] (\S+?)/(\S+): ok, reward (-?\d) +([0-9.]+)x eager +([0-9.]+)x compile")
        with open(path) as fh:
            for m in filter(None, map(line.match, fh)):
                out[m.group(1) + "/" + m.group(2)] = {"correct": True, "reward": int(m.group(3)),
                                                      "speedup_eager": float(m.group(4)),
                                                      "speedup_compile": float(m.group(5))}
    elif os.path.isdir(path):
        for f in glob.glob(os.path.join(path, "tasks", "*", "*.json")):
            with open(f) as fh:
                r = json.load(fh)
            out[r["level"] + "/" + r["stem"]] = r
    else:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.startswith("tasks/") and m.name.endswith(".json"):
                    r = json.load(io.TextIOWrapper(tar.extractfile(m)))
                    out[r["level"] + "/" + r["stem"]] = r
    return out


def spread(xs):
    xs = sorted(xs)
    if not xs:
        return "no data"
    return "min %.3f  p50 %.3f  p90 %.3f  max %.3f  (n=%d)" % (
        xs[0], statistics.median(xs), xs[min(len(xs) - 1, int(0.9 * len(xs)))], xs[-1], len(xs))


def one(recs):
    for model in ("candidate", "eager", "compile"):
        ratios, late = [], 0
        for r in recs.values():
            t = ((r.get("eval") or {}).get("timing") or {}).get(model) or {}
            if t.get("median_ms") and t.get("kernel_sum_ms"):
                ratios.append(t["median_ms"] / t["kernel_sum_ms"])
                late += t.get("late_calls") or 0
        print("%-9s event median / kernel sum: %s; late calls %d" % (model, spread(ratios), late))


def two(a, b):
    common = [k for k in a if k in b and a[k].get("correct") and b[k].get("correct")]
    for key in ("speedup_eager", "speedup_compile"):
        moved = [abs(math.log(b[k][key] / a[k][key])) for k in common if a[k].get(key) and b[k].get(key)]
        print("%-15s |log(B/A)|: %s" % (key, spread(moved)))
    flips = [k for k in common if a[k].get("reward") != b[k].get("reward")]
    print("reward differs on %d of %d tasks correct in both" % (len(flips), len(common)))
    for k in sorted(flips):
        print("  %s: %s -> %s (eager %.3fx -> %.3fx, compile %.3fx -> %.3fx)" % (
            k, a[k]["reward"], b[k]["reward"], a[k]["speedup_eager"] or 0, b[k]["speedup_eager"] or 0,
            a[k].get("speedup_compile") or 0, b[k].get("speedup_compile") or 0))


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    a = records(argv[1])
    print("A: %s (%d records)" % (argv[1], len(a)))
    one(a)
    if len(argv) == 3:
        b = records(argv[2])
        print("B: %s (%d records)" % (argv[2], len(b)))
        one(b)
        two(a, b)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
