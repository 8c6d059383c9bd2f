#!/usr/bin/env python3
"""A suite of public KernelBench single files, from cold, through `anvil bench` (issue 56's bars: 100
files, one per problem of levels 1 and 2, under --protocol kernelbench, in at most 10 minutes on one
GPU with their builds and baselines; KernelBench's public Triton runs, every verdict explained).

    python3 bench/leaderboard_suite.py --kernelbench KB (--leaderboard raw_data.json | --triton triton_runs)
        --out DIR [--per-level 50] [--limit-s 540] [-- more `anvil bench` arguments]

--leaderboard: the KernelBench leaderboard's kernels (anneouyang/KernelBenchLeaderboard,
docs/assets/raw_data.json: model generations KernelBench's harness found correct, CUDA through
load_inline): for each of the first --per-level problems of levels 1 and 2 that have one, the
generation with the best speedup over eager. --triton: KernelBench's branch sokserey/tritonDump,
`triton_runs/` (level1_triton/ and level2_triton/, each a results.jsonl and kernels/levelL_problemP_triton.py:
Triton generations with the speedup that run measured), the first --per-level problems of each level.
Nothing of them is committed; name the folder. The problems are KB's (a KernelBench tree; its sizes
may be newer than the generations', so a kernel written for older sizes can fail here, and the
verdict says why). The run gets its own empty ANVIL_CACHE (builds, baselines, vetting: everything
cold). Writes DIR/suite.json and DIR/suite.md: the wall time, the build-ahead phase, each file's
outcome, reward and whether its build was ahead.
"""
import argparse
import collections
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def pick(rows, level, n):
    """{problem_id: the generation with the best eager speedup} for the first n problems of `level`."""
    best = {}
    for r in rows:
        if r.get("level") == level and "load_inline" in r.get("code", ""):
            cur = best.get(r["problem_id"])
            if cur is None or (r.get("torch_speedup") or 0) > (cur.get("torch_speedup") or 0):
                best[r["problem_id"]] = r
    return {pid: best[pid] for pid in sorted(best)[:n]}


def pick_triton(runs, level, n):
    """{problem_id: {"code", "model", "file", "leaderboard_speedup"}} of triton_runs/levelN_triton for its
    first n problems (the dump's results.jsonl names each kernel and the speedup it measured)."""
    found = {}
    folder = os.path.join(runs, "level%d_triton" % level)
    speedups = {}
    try:
        with open(os.path.join(folder, "results.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                speedups[int(r["problem_id"])] = r.get("speedup")
    except (OSError, ValueError, KeyError):
        pass
    for name in os.listdir(os.path.join(folder, "kernels")):
        prefix = "level%d_problem" % level
        if name.startswith(prefix) and name.endswith("_triton.py"):
            pid = int(name[len(prefix):-len("_triton.py")])
            with open(os.path.join(folder, "kernels", name)) as f:
                found[pid] = {"code": f.read(), "model": "tritonDump", "file": name, "torch_speedup": speedups.get(pid)}
    return {pid: found[pid] for pid in sorted(found)[:n]}


def lay_out(kb, picked, per_level, root):
    """tasks/levelN/<KB file> and solutions/levelN/<same name>: `anvil bench`'s layout. picked(level, n):
    {problem_id: {"code", "model", "file", "torch_speedup"}}."""
    chosen = []
    for level in (1, 2):
        src = os.path.join(kb, "KernelBench", "level%d" % level)
        by_id = {int(f.split("_")[0]): f for f in os.listdir(src) if f.endswith(".py")}
        for d in ("tasks", "solutions"):
            os.makedirs(os.path.join(root, d, "level%d" % level), exist_ok=True)
        for pid, r in picked(level, per_level).items():
            if pid not in by_id:
                continue
            name = by_id[pid]
            with open(os.path.join(src, name)) as f, open(os.path.join(root, "tasks", "level%d" % level, name), "w") as t:
                t.write(f.read())
            with open(os.path.join(root, "solutions", "level%d" % level, name), "w") as s:
                s.write(r["code"])
            chosen.append({"task": "level%d/%s" % (level, name), "model": r.get("model"), "file": r.get("file"),
                           "leaderboard_speedup": r.get("torch_speedup")})
    return chosen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench tree (its KernelBench/level1, level2)")
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--leaderboard", help="KernelBenchLeaderboard's docs/assets/raw_data.json")
    source.add_argument("--triton", help="KernelBench's triton_runs folder (branch sokserey/tritonDump)")
    ap.add_argument("--per-level", type=int, default=50)
    ap.add_argument("--limit-s", type=int, default=0, help="stop `anvil bench` after this many seconds (0: none)")
    ap.add_argument("--out", required=True, help="a folder for suite.json and suite.md")
    ap.add_argument("extra", nargs="*", help="more `anvil bench` arguments, after --")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="anvil-leaderboard-")
    if a.leaderboard:
        rows = json.load(open(a.leaderboard))
        chosen = lay_out(a.kernelbench, lambda level, n: pick(rows, level, n), a.per_level, work)
    else:
        chosen = lay_out(a.kernelbench, lambda level, n: pick_triton(a.triton, level, n), a.per_level, work)
    kind = "leaderboard" if a.leaderboard else "Triton (tritonDump)"
    run = os.path.join(work, "run")
    env = dict(os.environ, ANVIL_CACHE=os.path.join(work, "cache"))
    cmd = [common.ANVIL, "bench", "--tasks", os.path.join(work, "tasks"), "--solutions", os.path.join(work, "solutions"),
           "--protocol", "kernelbench", "--no-progress", "--out", run, *a.extra]
    print("%d files; %s" % (len(chosen), " ".join(cmd)), flush=True)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=open(os.path.join(a.out, "bench.log"), "w"), stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        p.wait(timeout=a.limit_s or None)
    except subprocess.TimeoutExpired:
        # past the limit: the run and every process it started end (what finished is in its records)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    wall = time.perf_counter() - t0
    records = {}
    for path in glob.glob(os.path.join(run, "tasks", "*", "*.json")):
        rec = json.load(open(path))
        records[os.path.relpath(path, os.path.join(run, "tasks"))[:-len(".json")] + ".py"] = rec
    rows = []
    for c in chosen:
        rec = records.get(c["task"])
        res = (rec or {}).get("eval") or {}
        ahead = (rec or {}).get("build_ahead") or {}
        rows.append(dict(c, outcome=(rec or {}).get("outcome") or res.get("outcome"), reason=res.get("reason"),
                         reward=(rec or {}).get("reward", res.get("reward")),
                         built_ahead=bool(ahead.get("ok")) if ahead else None,
                         compiled_in_eval=((res.get("build") or {}).get("compiled")),
                         seconds=(rec or {}).get("seconds"),
                         message=((rec or {}).get("message") or res.get("message") or "")[:300]))
    prebuild = {}
    try:
        prebuild = json.load(open(os.path.join(run, "results.json"))).get("prebuild") or {}
    except (OSError, ValueError):
        pass
    judged = [r for r in rows if r["outcome"]]
    summary = {"fingerprint": common.fingerprint(), "files": len(chosen), "judged": len(judged),
               "wall_s": round(wall, 1), "exit": p.returncode, "limit_s": a.limit_s, "prebuild": prebuild,
               "outcomes": dict(collections.Counter("%s/%s" % (r["outcome"], r["reason"]) for r in judged)),
               "rewards": dict(collections.Counter(str(r["reward"]) for r in judged)),
               "built_ahead": sum(1 for r in judged if r["built_ahead"]), "rows": rows}
    json.dump(summary, open(os.path.join(a.out, "suite.json"), "w"), indent=1)
    fp = summary["fingerprint"]
    lines = ["Device: %s, driver %s, torch %s (CUDA %s), anvil %s, %s, %s cores." % (
        fp.get("device", "cpu"), fp.get("driver", "-"), fp["torch"], fp["torch_cuda"], fp["anvil_rev"], fp["date"],
        fp["host_cores"]), "",
        "# %d KernelBench %s single files, cold, `anvil bench --protocol kernelbench`" % (len(chosen), kind), "",
        "wall %.1f s (exit %s%s); %d judged; %d built ahead; outcomes %s; rewards %s" % (
            wall, p.returncode, ", stopped at the limit" if a.limit_s and wall >= a.limit_s else "", len(judged),
            summary["built_ahead"], json.dumps(summary["outcomes"]), json.dumps(summary["rewards"])), "",
        "| task | model | outcome | reward | their speedup | built ahead | units compiled in eval | seconds | message |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["task"], r["model"], "%s/%s" % (r["outcome"], r["reason"]) if r["outcome"] else "not reached",
            r["reward"], r["leaderboard_speedup"], r["built_ahead"], r["compiled_in_eval"], r["seconds"],
            r["message"].replace("|", "/").replace("\n", " ")[:160]))
    open(os.path.join(a.out, "suite.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines[:5]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
