"""KernelBench's own files through `anvil eval`, every defense on: its five few-shot candidates
against their problems, and its three adversarial unit-test kernels against level 1's first
problem, under each protocol, each with its expected outcome (issue 17's first bar); and the public
reward hacks of its branch bkal01/fix-level1-hacks (partial computation and analytical answers to
level 1's losses 94, 96 and 100, with the correct solutions beside them) and its own fixed kernel of
the Sakana lower-triangular matmul (branch sakana-kernel-repro), issue 54's.

KernelBench is not part of anvil (nothing of it is copied here): name a checkout of it, e.g.
`git clone https://github.com/ScalingIntelligence/KernelBench`, with --kernelbench DIR; the branch
cases need those branches' files in the same tree (`git checkout BRANCH -- PATH`), and are skipped
(listed as missing) where they are not.

    python3 bench/kernelbench_check.py --kernelbench ~/KernelBench --out bench/results/kb-files.json

The files' load_inline modules are built ahead first, all at once (`anvil build FILE`, as `anvil bench`
does), so each evaluation finds its module cached; --no-build-ahead leaves each to its evaluation.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FEW_SHOT = "src/kernelbench/prompts/few_shot"
ADVERSARIAL = "src/kernelbench/unit_tests/test_kernels"
MATMUL = "KernelBench/level1/1_Square_matrix_multiplication_.py"

# name -> (task, candidate, {protocol: expected}); an expectation is (outcomes, reasons or None)
OK = (["ok"], None)
CASES = {
    "add": (FEW_SHOT + "/model_ex_add.py", FEW_SHOT + "/model_new_ex_add.py", {"cuda-agent": OK, "kernelbench": OK}),
    "fuse_gelu": (FEW_SHOT + "/model_ex_fuse_gelu.py", FEW_SHOT + "/model_new_ex_fuse_gelu.py",
                  {"cuda-agent": OK, "kernelbench": OK}),
    "tiled_matmul": (FEW_SHOT + "/model_ex_tiled_matmul.py", FEW_SHOT + "/model_new_ex_tiled_matmul.py",
                     {"cuda-agent": OK, "kernelbench": OK}),
    "flash_attn": (FEW_SHOT + "/model_ex_flash_attn.py", FEW_SHOT + "/model_new_ex_flash_attn.py",
                   {"cuda-agent": OK, "kernelbench": OK}),
    # replaces only the max-pool: torch does the rest, which CUDA-Agent's rules forbid
    "mnist2": (FEW_SHOT + "/model_ex_mnist2.py", FEW_SHOT + "/model_new_ex_mnist2.py",
               {"cuda-agent": (["hack_suspected"], ["torch_fallback"]), "kernelbench": OK}),
    # torch::empty returned: whatever the allocator hands back must never pass
    "result_reuse": (MATMUL, ADVERSARIAL + "/result_reuse_kernel.py",
                     {p: (["wrong_answer", "hack_suspected"], None) for p in ("cuda-agent", "kernelbench")}),
    "zero_out": (MATMUL, ADVERSARIAL + "/zero_out_kernel.py",
                 {p: (["wrong_answer"], ["input_mutated"]) for p in ("cuda-agent", "kernelbench")}),
    # cuBLAS on a stream of its own, never joined: its time must not be credited
    "non_default_stream": (MATMUL, ADVERSARIAL + "/non_default_stream_kernel.py",
                           {p: (["hack_suspected", "wrong_answer"], None) for p in ("cuda-agent", "kernelbench")}),
}


# The branches' files (issue 54): every hack is -1 under both protocols (torch_fallback under
# cuda-agent, whose rules forbid the torch forward they all are); the correct solutions pass under
# kernelbench's rules (cuda-agent's forbid the torch division their C++ makes: either is theirs).
HACKS = "src/kernelbench/tests/solutions"
NEG = (["wrong_answer", "hack_suspected"], None)
for _n, _task in (("94", "94_MSELoss"), ("96", "96_HuberLoss"), ("100", "100_HingeLoss")):
    for _kind in ("partial_computation", "analytical"):
        CASES["%s_%s" % (_n, _kind)] = ("KernelBench/level1/%s.py" % _task, "%s/%s_%s_hack.py" % (HACKS, _task, _kind),
                                       {"cuda-agent": NEG, "kernelbench": NEG})
    for _kind in ("correct", "CORRECT"):
        CASES["%s_%s" % (_n, _kind)] = ("KernelBench/level1/%s.py" % _task, "%s/%s_%s.py" % (HACKS, _task, _kind),
                                       {"cuda-agent": (["ok", "hack_suspected"], [None, "torch_fallback"]),
                                        "kernelbench": OK})
CASES["sakana_fixed_2d"] = ("KernelBench/level1/15_Matmul_for_lower_triangular_matrices.py",
                            "sakana_kernels/level1_problem15/15_Matmul_for_lower_triangular_matrices_fixed_2d.py",
                            {"cuda-agent": (["ok", "hack_suspected"], [None, "torch_fallback"]), "kernelbench": OK})


def ends(message, head=300, tail=900):
    """A long message's first and last lines: what failed, and (for a build, a traceback) why."""
    return message if len(message) <= head + tail else message[:head] + "\n[...]\n" + message[-tail:]


def evaluate(kernelbench, name, protocol, extra):
    task, candidate, expected = CASES[name]
    cmd = [common.ANVIL, "eval", "--json", "--protocol", protocol, "--task", os.path.join(kernelbench, task),
           "--candidate", os.path.join(kernelbench, candidate), *extra]
    t0 = time.perf_counter()
    r = common.sh(cmd, timeout=900)
    wall = time.perf_counter() - t0
    try:
        result = json.loads(r.stdout)
    except json.JSONDecodeError:
        result = {"error": (r.stderr or r.stdout).strip()[-400:]}
    outcome = result.get("outcome") or ("ok" if result.get("status") == "ok" else result.get("status"))
    outcomes, reasons = expected[protocol]
    met = outcome in outcomes and (reasons is None or result.get("reason") in reasons)
    timing = result.get("timing") or {}
    return {"name": name, "protocol": protocol, "expected": {"outcome": outcomes, "reason": reasons},
            "outcome": outcome, "reason": result.get("reason"), "reward": result.get("reward"), "met": met,
            "exit": r.returncode, "message": ends(result.get("message") or result.get("error") or ""),
            "candidate_ms": timing.get("candidate_ms"), "eager_ms": timing.get("eager_ms"),
            "seconds": round(wall, 1)}


def build_ahead(kernelbench, names):
    """Every case's candidate file built at once (`anvil build FILE`): {file: the build's summary}."""
    files = sorted({os.path.join(kernelbench, CASES[n][1]) for n in names})

    def one(path):
        t0 = time.perf_counter()
        r = common.sh([common.ANVIL, "build", "--json", path], timeout=900)
        try:
            rep = json.loads(r.stdout)
        except json.JSONDecodeError:
            rep = {"ok": False, "error": (r.stderr or r.stdout).strip()[-300:]}
        return {"ok": rep.get("ok"), "compiled": rep.get("compiled"), "units": len(rep.get("units") or []),
                "error": rep.get("error"), "warnings": rep.get("warnings"), "seconds": round(time.perf_counter() - t0, 1)}

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return dict(zip((os.path.relpath(f, kernelbench) for f in files), pool.map(one, files)))


def markdown(fp, rows, kernelbench_rev):
    lines = ["Device: %s, driver %s, torch %s (CUDA %s), anvil %s, KernelBench %s, %s." % (
        fp.get("device", "cpu"), fp.get("driver", "-"), fp["torch"], fp["torch_cuda"], fp["anvil_rev"],
        kernelbench_rev, fp["date"]), "",
        "# KernelBench's own files, every defense on", "",
        "| file | protocol | expected | got | reward | met | candidate ms | eager ms | seconds |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        want = "|".join(r["expected"]["outcome"]) + ("/" + "|".join(x or "-" for x in r["expected"]["reason"])
                                                      if r["expected"]["reason"] else "")
        got = (r["outcome"] or "-") + ("/" + r["reason"] if r["reason"] else "")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], r["protocol"], want, got, r["reward"], "yes" if r["met"] else "**no**",
            r["candidate_ms"], r["eager_ms"], r["seconds"]))
    lines += ["", "met: %d of %d" % (sum(r["met"] for r in rows), len(rows)), ""]
    misses = [r for r in rows if not r["met"]]
    if misses:
        lines += ["## Not as expected", ""] + ["- %s (%s): %s" % (r["name"], r["protocol"], r["message"])
                                               for r in misses] + [""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", required=True, help="a checkout of KernelBench")
    ap.add_argument("--protocol", action="append", choices=["cuda-agent", "kernelbench"],
                    help="the protocols to judge under (default: both)")
    ap.add_argument("--only", help="comma-separated case names (default: all): " + ",".join(CASES))
    ap.add_argument("--out", required=True, help="the results' JSON file (a .md is written beside it)")
    ap.add_argument("--no-build-ahead", action="store_true", help="leave each file's build to its evaluation")
    ap.add_argument("extra", nargs="*", help="more `anvil eval` arguments, after --")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.kernelbench, FEW_SHOT)):
        sys.exit("%s is not a KernelBench checkout (no %s)" % (a.kernelbench, FEW_SHOT))
    names = a.only.split(",") if a.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit("unknown case %s (known: %s)" % (", ".join(unknown), ", ".join(CASES)))
    present = [n for n in names if os.path.isfile(os.path.join(a.kernelbench, CASES[n][1]))]
    ahead, t0 = {}, time.perf_counter()
    if not a.no_build_ahead:
        ahead = build_ahead(a.kernelbench, present)
        for f, b in ahead.items():
            print("built ahead %-70s ok=%s compiled=%s units=%s %.1f s %s" % (
                f, b["ok"], b["compiled"], b["units"], b["seconds"], b["error"] or ""), flush=True)
        print("built %d files ahead in %.1f s" % (len(ahead), time.perf_counter() - t0), flush=True)
    rows = []
    for name in names:
        if not os.path.isfile(os.path.join(a.kernelbench, CASES[name][1])):
            print("%-20s missing from this tree: %s" % (name, CASES[name][1]), flush=True)
            continue
        for protocol in a.protocol or ["cuda-agent", "kernelbench"]:
            row = evaluate(a.kernelbench, name, protocol, a.extra)
            rows.append(row)
            print("%-20s %-12s %-40s %s (%.1f s)" % (name, protocol, "%s/%s reward %s" % (
                row["outcome"], row["reason"], row["reward"]), "met" if row["met"] else "NOT MET: " + row["message"][:200],
                row["seconds"]), flush=True)
    rev = os.environ.get("KERNELBENCH_REV", "unknown")
    fp = common.fingerprint()
    json.dump({"fingerprint": fp, "kernelbench": rev, "build_ahead": ahead, "rows": rows}, open(a.out, "w"), indent=1)
    md = markdown(fp, rows, rev)
    open(os.path.splitext(a.out)[0] + ".md", "w").write(md)
    print(md)
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
