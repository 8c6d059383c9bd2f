#!/usr/bin/env python3
"""Build speed: anvil's cold and cached builds in both binding modes, with
torch.utils.cpp_extension.load_inline timed in the same run as the anchor.

    python3 bench/build_bench.py [--reps 5] [--anchor-reps 2] [--out PATH]

Candidates: examples/candidates/02_softmax/cuda (fast mode, two kernels) and
.../cuda_compat (CUDA-Agent mode); without a GPU use --cpu for the CPU
variant 01_elementwise_chain/cpu. "Cold" = every candidate source is new (a
nonce is appended), while the once-per-environment artifacts (anvil's torch
runtime, the precompiled torch headers) exist; their one-time cost is
reported separately. The anchor compiles the same kind of one-kernel
extension through torch's load_inline, as a KernelBench candidate does.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

EXAMPLES = os.path.join(common.ROOT, "examples", "candidates")

ANCHOR = r'''
import os, sys, time, torch
from torch.utils.cpp_extension import load_inline
src = open(sys.argv[1]).read()
wrapper = """
torch::Tensor chain(torch::Tensor x, torch::Tensor bias, double scale, double lo, double hi) {
  auto y = torch::empty_like(x);
  int64_t cols = bias.size(0), rows = x.numel() / cols;
  elementwise_chain_launch(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
                           (float)scale, (float)lo, (float)hi, at::cuda::getCurrentCUDAStream().stream());
  return y;
}
"""
cuda_src = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n" + src + wrapper + "// " + sys.argv[3] + "\n"
cpp_src = "torch::Tensor chain(torch::Tensor x, torch::Tensor bias, double scale, double lo, double hi);"
use_anvil = sys.argv[2] == "anvil"
if use_anvil:
    sys.path.insert(0, os.path.join(sys.argv[4], "python"))
    from anvil.load_inline import load_inline as anvil_load_inline
    fn = anvil_load_inline
else:
    fn = load_inline
t0 = time.perf_counter()
m = fn(name="chain_" + sys.argv[3], cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["chain"],
       build_directory=sys.argv[5], verbose=False)
print(time.perf_counter() - t0)
'''


def cold_and_cached(src, reps, work, label):
    cold, setup = [], []
    last = None
    for _ in range(reps):
        d = common.fresh_copy(src, random.getrandbits(64), work)
        wall, rep = common.anvil_build(d)
        if rep["setup_seconds"] > 0.5:  # the first build in this environment: set-up, not a cold build
            setup.append(rep["setup_seconds"])
            wall, rep = common.anvil_build(common.fresh_copy(src, random.getrandbits(64), work))
        assert rep["compiled"] >= 1, rep
        cold.append(wall)
        last = d
    cached = []
    for _ in range(reps):
        wall, rep = common.anvil_build(last)
        assert rep["compiled"] == 0 and rep["link_cached"], rep
        cached.append(wall)
    # One file changed: the binding.
    binding = [f for f in os.listdir(os.path.join(last, "kernels")) if f.endswith("_binding.cpp")][0]
    with open(os.path.join(last, "kernels", binding), "a") as f:
        f.write("// edited\n")
    one_file, rep = common.anvil_build(last)
    assert rep["compiled"] == 1, rep
    print(f"{label}: cold {[round(x, 2) for x in cold]} cached {[round(x, 3) for x in cached]} one-file {one_file:.2f}",
          flush=True)
    return {"cold_s": cold, "cached_s": cached, "one_file_change_s": one_file, "setup_s": setup}


def anchor(kind, reps, work, cu):
    times = []
    script = os.path.join(work, "anchor.py")
    with open(script, "w") as f:
        f.write(ANCHOR)
    for i in range(reps):
        nonce = f"{random.getrandbits(48):x}"
        bdir = tempfile.mkdtemp(prefix="li-", dir=work)
        r = common.sh([sys.executable, script, cu, kind, nonce, common.ROOT, bdir])
        if r.returncode != 0:
            raise RuntimeError(f"{kind} load_inline failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        times.append(float(r.stdout.strip().splitlines()[-1]))
        if kind == "anvil" and i == 0:
            # The same sources again, in a new directory: served by anvil's cache.
            r = common.sh([sys.executable, script, cu, kind, nonce, common.ROOT, tempfile.mkdtemp(dir=work)])
            times_cached = float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    print(f"load_inline via {kind}: {[round(t, 1) for t in times]}", flush=True)
    return {"cold_s": times, **({"cached_s": [times_cached]} if kind == "anvil" else {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--anchor-reps", type=int, default=2)
    ap.add_argument("--cpu", action="store_true", help="time the CPU variant only (no GPU or nvcc needed)")
    ap.add_argument("--no-anchor", action="store_true", help="skip the load_inline timings")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="build-bench-")
    fp = common.fingerprint()
    results = {"fingerprint": fp}
    if a.cpu:
        results["cpu_fast"] = cold_and_cached(os.path.join(EXAMPLES, "01_elementwise_chain", "cpu"), a.reps, work, "cpu fast")
        results["cpu_compat"] = cold_and_cached(os.path.join(EXAMPLES, "01_elementwise_chain", "cpu_compat"), a.reps, work,
                                                "cpu compat")
        rows = [("CPU variant, fast mode (01_elementwise_chain/cpu)", results["cpu_fast"]),
                ("CPU variant, CUDA-Agent mode (01_elementwise_chain/cpu_compat)", results["cpu_compat"])]
    else:
        results["fast"] = cold_and_cached(os.path.join(EXAMPLES, "02_softmax", "cuda"), a.reps, work, "fast")
        results["compat"] = cold_and_cached(os.path.join(EXAMPLES, "02_softmax", "cuda_compat"), a.reps, work, "compat")
        rows = [("fast mode, two-kernel example (02_softmax/cuda)", results["fast"]),
                ("CUDA-Agent mode, same kernels (02_softmax/cuda_compat)", results["compat"])]
        if not a.no_anchor:
            cu = os.path.join(EXAMPLES, "01_elementwise_chain", "cuda", "kernels", "elementwise_chain.cu")
            results["load_inline_torch"] = anchor("torch", a.anchor_reps, work, cu)
            results["load_inline_anvil"] = anchor("anvil", 1, work, cu)
            rows += [("torch load_inline, one-kernel extension (anchor)", results["load_inline_torch"]),
                     ("anvil.load_inline, same sources as the anchor", results["load_inline_anvil"])]
    table = ["# Build speed", "",
             f"{fp.get('device', 'no GPU')}, driver {fp.get('driver', '-')}, {fp['host_cores']} cores, torch {fp['torch']} "
             f"(CUDA {fp['torch_cuda']}), {fp.get('nvcc', '')}, {fp['date']}", "",
             "Wall seconds of the whole `anvil build` command (medians; all runs in the JSON beside this file).", "",
             "| what | cold (median) | cached (median) | one file changed | runs |", "|---|---|---|---|---|"]
    for label, r in rows:
        cached = f"{common.median(r['cached_s']):.3f}" if r.get("cached_s") else "-"
        one = f"{r['one_file_change_s']:.2f}" if "one_file_change_s" in r else "-"
        table.append(f"| {label} | {common.median(r['cold_s']):.2f} | {cached} | {one} | {len(r['cold_s'])} |")
    setups = [s for r in results.values() if isinstance(r, dict) for s in r.get("setup_s", [])]
    table += ["", "One-time environment set-up (anvil's torch runtime, precompiled torch headers), per environment: "
              + (", ".join(f"{s:.1f} s" for s in setups) if setups else "already cached") + ".", ""]
    out = a.out or os.path.join(common.ROOT, "bench", "results",
                                ("build-cpu-" if a.cpu else "build-") + fp["date"][:10])
    common.write_results(out, results, "\n".join(table) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
