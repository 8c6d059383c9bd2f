#!/usr/bin/env python3
"""One suite benchmarked on one GPU at a time and on several at once (issue 24), compared:

    python3 bench/multi_gpu_check.py --single 0=RUN_GPU0 --single 1=RUN_GPU1 --multi RUN_BOTH [--out F.json]

Each RUN is an `anvil bench` run directory (its bench.json and per-task records). It prints and
writes, standard library only:
- throughput: tasks per minute of each run (its last invocation), the multi-GPU run's per GPU, and
  that per-GPU figure over the single-GPU runs' mean (the bar: at least 0.9);
- interference: for each task correct in both, the candidate's time in the multi-GPU run against the
  single-GPU run on the same GPU (the record says which GPU timed it), |log(multi/single)| median,
  p90 and max, and how many moved more than 3%; the speedups and rewards that changed;
- the spread between the GPUs themselves: the same candidates timed on GPU 0 alone and GPU 1 alone.
The baselines (eager, torch.compile) are the cached ones in every run, so a candidate's time is the
whole of what changes its speedup.
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing_check import records  # noqa: E402  (a run's per-task records: {level/stem: record})


def last(run):
    with open(os.path.join(run, "bench.json")) as fh:
        return json.load(fh)["last"]


def moved(a, b, key="candidate_ms"):
    """|log(b/a)| per task timed correctly in both runs."""
    out = {}
    for k in sorted(set(a) & set(b)):
        x, y = a[k].get(key), b[k].get(key)
        if a[k].get("correct") and b[k].get("correct") and x and y:
            out[k] = abs(math.log(y / x))
    return out


def summary(d):
    if not d:
        return {"tasks": 0}
    v = sorted(d.values())
    return {"tasks": len(v), "median_pct": round(100 * (math.exp(statistics.median(v)) - 1), 2),
            "p90_pct": round(100 * (math.exp(v[min(len(v) - 1, int(0.9 * len(v)))]) - 1), 2),
            "max_pct": round(100 * (math.exp(v[-1]) - 1), 2),
            "over_3pct": sum(1 for x in v if x > math.log(1.03)),
            "worst": [[k, round(100 * (math.exp(x) - 1), 2)] for k, x in sorted(d.items(), key=lambda kv: -kv[1])[:5]]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", action="append", required=True, help="GPU=RUN: a run on that GPU alone")
    ap.add_argument("--multi", required=True, help="a run over several GPUs at once")
    ap.add_argument("--out")
    a = ap.parse_args()
    singles = {int(s.split("=", 1)[0]): s.split("=", 1)[1] for s in a.single}
    single_recs = {g: records(r) for g, r in singles.items()}
    multi_recs = records(a.multi)
    ml = last(a.multi)
    gpus = ml.get("gpus") or []
    doc = {"runs": {"multi": a.multi, **{"gpu%d" % g: r for g, r in singles.items()}}, "throughput": {}}

    tp = doc["throughput"]
    for g, r in singles.items():
        l = last(r)
        tp["gpu%d_alone" % g] = {"evaluated": l["evaluated"], "seconds": round(l["seconds"], 1),
                                 "tasks_per_minute": round(l["tasks_per_minute"], 2)}
    tp["multi"] = {"gpus": gpus, "evaluated": ml["evaluated"], "seconds": round(ml["seconds"], 1),
                   "tasks_per_minute": round(ml["tasks_per_minute"], 2),
                   "per_gpu": round(ml["tasks_per_minute"] / max(1, len(gpus)), 2),
                   "tasks_by_gpu": {str(g): sum(1 for r in multi_recs.values() if r.get("gpu") == g) for g in gpus}}
    alone = statistics.mean(v["tasks_per_minute"] for k, v in tp.items() if k.endswith("_alone"))
    tp["per_gpu_over_alone"] = round(tp["multi"]["per_gpu"] / alone, 3) if alone else None

    # The same candidate, timed with the other GPUs busy against timed alone on the same GPU.
    inter = {}
    rewards = []
    for g, recs in single_recs.items():
        on_g = {k: r for k, r in multi_recs.items() if r.get("gpu") == g}
        inter.update(moved(recs, on_g))
        for k, r in on_g.items():
            if k in recs and recs[k].get("reward") != r.get("reward"):
                rewards.append({"task": k, "gpu": g, "alone": recs[k].get("reward"), "multi": r.get("reward"),
                                "speedup_compile_alone": recs[k].get("speedup_compile"),
                                "speedup_compile_multi": r.get("speedup_compile")})
    doc["interference"] = summary(inter)
    doc["interference"]["reward_changes"] = rewards
    doc["outcomes_differ"] = [k for g, recs in single_recs.items() for k, r in multi_recs.items()
                              if r.get("gpu") == g and k in recs and recs[k].get("outcome") != r.get("outcome")]
    gs = sorted(single_recs)
    if len(gs) >= 2:
        doc["between_gpus_alone"] = summary(moved(single_recs[gs[0]], single_recs[gs[1]]))

    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    i = doc["interference"]
    print("throughput: %s tasks/min on %d GPUs, %s per GPU, %sx the one-GPU runs' %.2f; interference: %d tasks, "
          "candidate time moved median %s%%, p90 %s%%, max %s%%, %d over 3%%, %d rewards changed" % (
              tp["multi"]["tasks_per_minute"], len(gpus), tp["multi"]["per_gpu"], tp["per_gpu_over_alone"], alone,
              i["tasks"], i.get("median_pct"), i.get("p90_pct"), i.get("max_pct"), i.get("over_3pct", 0),
              len(rewards)))


if __name__ == "__main__":
    main()
