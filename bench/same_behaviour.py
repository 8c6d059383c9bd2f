#!/usr/bin/env python3
"""Compares two runs of one step of bench/gpu_same_behaviour.sh (the hack suite, the red team, or
`anvil bench` over the bundled examples) verdict by verdict: outcome, reason and reward of every
entry, and for `bench` the speed-ups beside them (a reward decided by time can move with the
machine's noise; the ratio says by how much).

    python3 bench/same_behaviour.py hack|redteam|bench BEFORE.json AFTER.json

Prints a table and exits 1 when an entry is missing on one side or a verdict differs.
"""
import json
import sys


def verdicts(step, path):
    """{entry: (outcome, reason, reward, extra)} of one run."""
    with open(path) as f:
        run = json.load(f)
    out = {}
    if step == "bench":
        for t in run["tasks"]:
            out[t["stem"]] = (t.get("outcome"), t.get("reason"), t.get("reward"),
                              (t.get("speedup_eager"), t.get("speedup_compile")))
        return out
    for r in run["results"]:
        res = r.get("result") or {}
        key = "%s/%s" % (r["name"], r.get("variant"))
        out[key] = (res.get("outcome"), res.get("reason"), res.get("reward"), r.get("pass"))
    return out


def speed(pair):
    return "/".join("-" if s is None else "%.3f" % s for s in pair)


def main():
    step, before_path, after_path = sys.argv[1:4]
    before, after = verdicts(step, before_path), verdicts(step, after_path)
    differ = 0
    print("%-44s %-40s %-40s" % ("entry", "before", "after"))
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key), after.get(key)
        same = b is not None and a is not None and b[:3] == a[:3]
        differ += not same
        show = lambda v: "missing" if v is None else "%s %s %s%s" % (
            v[0], v[1] or "-", v[2], " x" + speed(v[3]) if step == "bench" else ("" if v[3] else " (FAILED)"))
        print("%-44s %-40s %-40s%s" % (key, show(b), show(a), "" if same else "  <- differs"))
    print("%d entries, %d the same, %d differ" % (len(set(before) | set(after)), len(set(before) | set(after)) - differ,
                                                 differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
