#!/usr/bin/env python3
"""Cold builds of KernelBench single files (their load_inline modules), as anvil now builds them
(a .cu with the fewest of torch's headers that compile it: ATen's Tensor and the per-operator
headers of what it calls, else torch/types.h without `<torch/extension.h>`; the build's `headers`
says which) against the same file compiled as it is: issue 56's "a fast cold build of a single file".

    python3 bench/load_inline_cold.py --kernelbench KB [--runs 1] [--as-given N] [--out FILE.json]

Each file's load_inline calls are read by `python -m anvil.ahead` and built with `anvil
build-sources` into one cache whose environment-level artifacts (the runtime, the precompiled torch
header) are made first and not timed; a nonce comment makes every build's sources new, so each is a
cold build of the file's own units. "as given" adds the comment `// py::` to the .cu, which makes
anvil compile it as it is (a file naming pybind11 needs the full header): the same code, the old
path. Prints each file's wall seconds and the nvcc unit's, both modes, and the medians ("lighter":
anvil's own choice of headers, a failed try's seconds included).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FILES = ["src/kernelbench/prompts/few_shot/model_new_ex_%s.py" % n for n in
         ("add", "fuse_gelu", "tiled_matmul", "flash_attn", "mnist2")] + \
        ["src/kernelbench/tests/solutions/%s_correct.py" % n for n in ("94_MSELoss", "96_HuberLoss", "100_HingeLoss")] + \
        ["sakana_kernels/level1_problem15/15_Matmul_for_lower_triangular_matrices_fixed_2d.py"]


def specs(path, out):
    env = dict(os.environ, PYTHONPATH=os.path.join(common.ROOT, "python"))
    r = subprocess.run([sys.executable, "-m", "anvil.ahead", "--out", out, path], capture_output=True, text=True,
                       env=env, check=True)
    return json.loads(r.stdout)["builds"]


def build(spec, out, nonce, as_given):
    for source in spec["sources"]:
        text = open(source).read()
        if source.endswith(".cu"):
            text += "\n// %s%s\n" % (nonce, " py::" if as_given else "")
        else:
            text += "\n// %s\n" % nonce
        open(source, "w").write(text)
    argv = [common.ANVIL, "build-sources", "--name", spec["name"], "--out", out]
    for key, option in (("cflags", "--cflag"), ("cuda_cflags", "--cuda-cflag"), ("ldflags", "--ldflag"),
                        ("include_dirs", "--include")):
        for v in spec[key]:
            argv += [option, v]
    t0 = time.perf_counter()
    r = subprocess.run(argv + spec["sources"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    reply = json.loads(r.stdout)
    nvcc = sum(u["seconds"] for u in reply.get("units", []) if u["tool"] == "nvcc")
    return {"ok": reply.get("ok"), "headers": reply.get("headers"), "wall_s": round(wall, 2), "nvcc_s": round(nvcc, 2),
            "diagnostics": (reply.get("diagnostics") or "")[:300]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench tree holding the files above")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", help="the results' JSON file")
    ap.add_argument("--as-given", type=int, default=None, metavar="N",
                    help="build only the first N files as given too (default: all; the lighter build always)")
    a = ap.parse_args()
    os.environ.setdefault("ANVIL_CACHE", tempfile.mkdtemp(prefix="anvil-cold-"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = specs(os.path.join(a.kernelbench, FILES[0]), os.path.join(tmp, "warm"))[0]
        build(warm, os.path.join(tmp, "warm-out"), "warm", True)  # the runtime and the PCH, not timed
        for index, rel in enumerate(FILES):
            path = os.path.join(a.kernelbench, rel)
            if not os.path.isfile(path):
                print("%-60s missing" % rel)
                continue
            for run in range(a.runs):
                both = a.as_given is None or index < a.as_given
                for as_given in (True, False) if both else (False,):  # alternated: the machine's drift hits both
                    mode = "as_given" if as_given else "lighter"
                    work = os.path.join(tmp, "%s-%d-%s" % (os.path.basename(rel), run, mode))
                    for spec in specs(path, work):
                        r = build(spec, work + "-out", "%s %d %f" % (mode, run, time.time()), as_given)
                        rows.append(dict(r, file=rel, module=spec["name"], mode=mode, run=run))
                        print("%-60s %-9s %s wall %6.1f s  nvcc %6.1f s %s" % (
                            os.path.basename(rel), mode, "ok " if r["ok"] else "ERR", r["wall_s"], r["nvcc_s"],
                            r["diagnostics"][:120].replace("\n", " ")), flush=True)
    summary = {}
    for mode in ("as_given", "lighter"):
        ok = [r for r in rows if r["mode"] == mode and r["ok"]]
        if ok:
            summary[mode] = {"builds": len(ok), "wall_p50_s": statistics.median(r["wall_s"] for r in ok),
                             "nvcc_p50_s": statistics.median(r["nvcc_s"] for r in ok)}
    print(json.dumps(summary))
    if a.out:
        json.dump({"fingerprint": common.fingerprint(), "rows": rows, "summary": summary}, open(a.out, "w"), indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
