#!/usr/bin/env python3
"""The evaluation core on the GPU host: one command, every bar of the issue.

    python3 bench/eval_bench.py [--out PATH] [--zygote]

1. A table over the bundled examples (CUDA candidates, both binding modes):
   outcome, reward, candidate / eager / compile ms, speedups, build s, eval s.
2. The wall time of one evaluation with builds and baselines cached, with a
   fresh runner process and with a warm zygote.
3. Timing stability: each candidate evaluated 5 times in separate processes;
   max/min of the candidate medians.
4. Isolation: a good candidate, then a crashing one (illegal memory access),
   a hanging one (a kernel that never ends), then the good one again: the
   outcomes, and the good one's result and time before and after.
5. The broken candidates and their outcomes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

EX = os.path.join(common.ROOT, "examples")


def evaluate(task, cand, *extra, zygote=None):
    cmd = [common.ANVIL, "eval", "--json", "--task", task, "--candidate", cand, *extra]
    if zygote:
        cmd += ["--zygote", zygote]
    t0 = time.perf_counter()
    r = common.sh(cmd)
    wall = time.perf_counter() - t0
    try:
        j = json.loads(r.stdout)
    except json.JSONDecodeError:
        j = {"outcome": "could not evaluate", "message": (r.stderr or r.stdout)[-500:]}
    j["_wall"] = wall
    return j


def fmt(v, spec="{:.4f}"):
    return spec.format(v) if isinstance(v, (int, float)) else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--stability-runs", type=int, default=5)
    a = ap.parse_args()
    fp = common.fingerprint()
    tasks = sorted(f[:-3] for f in os.listdir(os.path.join(EX, "tasks")) if f.endswith(".py"))
    out = {"fingerprint": fp}
    path = a.out or os.path.join(common.ROOT, "bench", "results", "eval-" + fp["date"][:10])

    def save():  # after every section, so a cut-off run keeps what it measured
        common.write_results(path, out, "\n".join(lines) + "\n", quiet=True)

    lines = ["# Evaluation core", "",
             f"{fp.get('device', '?')}, driver {fp.get('driver', '?')}, torch {fp['torch']} (CUDA {fp['torch_cuda']}), "
             f"{fp.get('nvcc', '')}, {fp['date']}", ""]

    # 1. The table (the first evaluation of each task also measures its baselines).
    rows = []
    for t in tasks:
        for v in ("cuda", "cuda_compat"):
            cand = os.path.join(EX, "candidates", t, v)
            if os.path.isdir(cand):
                j = evaluate(os.path.join(EX, "tasks", t + ".py"), cand)
                rows.append((t, v, j))
                print(t, v, j.get("outcome"), j.get("reward"), round(j["_wall"], 2), flush=True)
    out["table"] = [{"task": t, "variant": v, **{k: j.get(k) for k in ("outcome", "reward", "timing", "seconds", "build")},
                     "wall_s": j["_wall"]} for t, v, j in rows]
    lines += ["## Bundled examples", "", "Strict tolerances, 5 trials, 30 timed calls with an L2 flush and 4 rotated input "
              "sets, TF32 off; compile = torch.compile default mode. First evaluation of each task (baselines measured).", "",
              "| task | variant | outcome | reward | candidate ms | eager ms | compile ms | vs eager | vs compile | build s | eval s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t, v, j in rows:
        tm = j.get("timing") or {}
        b = j.get("build") or {}
        lines.append(f"| {t} | {v} | {j.get('outcome')} | {j.get('reward')} | {fmt(tm.get('candidate_ms'))} | "
                     f"{fmt(tm.get('eager_ms'))} | {fmt(tm.get('compile_ms'))} | {fmt(tm.get('speedup_eager'), '{:.2f}x')} | "
                     f"{fmt(tm.get('speedup_compile'), '{:.2f}x')} | {fmt(b.get('seconds'), '{:.2f}')} | {j['_wall']:.2f} |")

    save()
    # 2. Cached evaluation time, fresh process and zygote.
    zdir = tempfile.mkdtemp(prefix="zygote-")
    sock = os.path.join(zdir, "z.sock")
    env = dict(os.environ, PYTHONPATH=os.path.join(common.ROOT, "python"))
    zy = subprocess.Popen([sys.executable, "-m", "anvil.zygote", "--socket", sock], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready = zy.stdout.readline()
    print("zygote:", ready.strip(), flush=True)
    cached = {}
    for t in ("01_elementwise_chain", "05_conv_bias_relu"):
        task, cand = os.path.join(EX, "tasks", t + ".py"), os.path.join(EX, "candidates", t, "cuda")
        fresh = [evaluate(task, cand, "--zygote", "none")["_wall"] for _ in range(3)]
        warm = [evaluate(task, cand) for _ in range(3)]  # the default: anvil's own warm zygote
        cached[t] = {"fresh_process_s": fresh, "zygote_s": [w["_wall"] for w in warm],
                     "zygote_outcomes": [w.get("outcome") for w in warm]}
        print(t, cached[t], flush=True)
    out["cached_eval"] = cached
    lines += ["", "## One evaluation with builds and baselines cached", "",
              "| task | fresh runner process (--zygote none), s (3 runs) | forked from the warm zygote (default), s (3 runs) |", "|---|---|---|"]
    for t, c in cached.items():
        lines.append(f"| {t} | {', '.join(f'{x:.2f}' for x in c['fresh_process_s'])} | "
                     f"{', '.join(f'{x:.2f}' for x in c['zygote_s'])} |")

    save()
    # 3. Timing stability across processes.
    stab = []
    for t in tasks:
        task, cand = os.path.join(EX, "tasks", t + ".py"), os.path.join(EX, "candidates", t, "cuda")
        meds = []
        for _ in range(a.stability_runs):
            j = evaluate(task, cand)
            if (j.get("timing") or {}).get("candidate_ms"):
                meds.append(j["timing"]["candidate_ms"])
        ratio = max(meds) / min(meds) if meds else None
        stab.append({"task": t, "medians_ms": meds, "max_over_min": ratio})
        print(t, meds, ratio, flush=True)
    out["stability"] = stab
    lines += ["", f"## Timing stability: {a.stability_runs} evaluations in separate processes", "",
              "| task | candidate medians, ms | max/min | kernel >= 100 us |", "|---|---|---|---|"]
    for s in stab:
        big = s["medians_ms"] and min(s["medians_ms"]) >= 0.1
        lines.append(f"| {s['task']} | {', '.join(f'{m:.4f}' for m in s['medians_ms'])} | "
                     f"{fmt(s['max_over_min'], '{:.3f}')} | {'yes' if big else 'no'} |")

    save()
    # 4. Isolation: crash and hang between two good evaluations.
    task = os.path.join(EX, "tasks", "01_elementwise_chain.py")
    good = os.path.join(EX, "candidates", "01_elementwise_chain", "cuda")
    seq = [("good", good, []), ("crash", os.path.join(EX, "broken", "crash", "cuda"), []),
           ("good", good, []), ("hang", os.path.join(EX, "broken", "hang", "cuda"), ["--timeout", "20"]),
           ("good", good, [])]
    iso = []
    for label, cand, extra in seq:
        j = evaluate(task, cand, *extra, "--seed", "11")
        iso.append({"candidate": label, "outcome": j.get("outcome"), "reward": j.get("reward"),
                    "candidate_ms": (j.get("timing") or {}).get("candidate_ms"), "wall_s": j["_wall"],
                    "message": (j.get("message") or "")[:160]})
        print(iso[-1], flush=True)
    out["isolation"] = iso
    lines += ["", "## Isolation: a crash and a hang between good evaluations (default runner: the warm zygote)", "",
              "| step | outcome | reward | candidate ms | wall s | message |", "|---|---|---|---|---|---|"]
    for s in iso:
        lines.append(f"| {s['candidate']} | {s['outcome']} | {s['reward']} | {fmt(s['candidate_ms'])} | "
                     f"{s['wall_s']:.1f} | {s['message'].splitlines()[0] if s['message'] else ''} |")

    save()
    # 5. Broken candidates.
    broken = []
    for b in sorted(os.listdir(os.path.join(EX, "broken"))):
        cand = os.path.join(EX, "broken", b, "cuda")
        if not os.path.isdir(cand):
            continue
        j = evaluate(task, cand, "--timeout", "20")
        broken.append({"candidate": b, "outcome": j.get("outcome"), "reward": j.get("reward"),
                       "message": (j.get("message") or "")[:200], "wall_s": j["_wall"]})
        print(broken[-1], flush=True)
    out["broken"] = broken
    lines += ["", "## Broken candidates (task 01_elementwise_chain)", "",
              "| candidate | outcome | reward | wall s | message (first line) |", "|---|---|---|---|---|"]
    for s in broken:
        lines.append(f"| {s['candidate']} | {s['outcome']} | {s['reward']} | {s['wall_s']:.1f} | "
                     f"{s['message'].splitlines()[0] if s['message'] else ''} |")
    zy.kill()
    common.write_results(path, out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
