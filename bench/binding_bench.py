#!/usr/bin/env python3
"""Per-call cost of anvil's binding layers, against calling the same kernel from C++.

    python3 bench/binding_bench.py [--out bench/results/binding-DATE]

Builds bench/binding_overhead/tiny.cu three ways (fast mode, CUDA-Agent mode,
a plain shared library for ctypes) plus a C++ driver, then times N calls of
each from a fresh process: with a 1024-element launch, and with n=0 (the
launcher returns at once) to isolate the call path itself. Needs a GPU.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.join(common.ROOT, "bench", "binding_overhead")

TIMER = r'''
import ctypes, json, sys, time, torch
sys.path.insert(0, sys.argv[1])
kind, n, calls = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = torch.randn(max(n, 1), device="cuda")[:n]
y = torch.empty_like(x)
if kind == "ctypes":
    lib = ctypes.CDLL(sys.argv[5])
    lib.add_one_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    stream = torch.cuda.current_stream().cuda_stream
    call = lambda: lib.add_one_launch(x.data_ptr(), y.data_ptr(), x.numel(), stream)
elif kind == "torch_add":
    call = lambda: torch.add(x, 1.0, out=y)
else:
    import cuda_extension as ext
    call = (lambda: ext.add_one(x)) if kind.endswith("alloc") else (lambda: ext.add_one_into(x, y))
for _ in range(2000): call()
torch.cuda.synchronize()
reps = []
for _ in range(7):
    t0 = time.perf_counter()
    for _ in range(calls): call()
    torch.cuda.synchronize()
    reps.append((time.perf_counter() - t0) / calls * 1e6)
reps.sort()
print(json.dumps({"us_per_call": reps[len(reps) // 2], "min": reps[0], "max": reps[-1]}))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="binding-bench-")
    fast, compat = os.path.join(work, "fast"), os.path.join(work, "compat")
    for mode, dst in (("fast", fast), ("compat", compat)):
        shutil.copytree(os.path.join(HERE, mode), dst)
        shutil.copy(os.path.join(HERE, "tiny.cu"), os.path.join(dst, "kernels"))
        common.anvil_build(dst)
    lib = os.path.join(work, "libtiny.so")
    base = os.path.join(work, "cpp_baseline")
    for cmd in (["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", os.path.join(HERE, "tiny.cu"), "-o", lib],
                ["nvcc", "-O3", "-std=c++17", os.path.join(HERE, "cpp_baseline.cu"), os.path.join(HERE, "tiny.cu"), "-o", base]):
        r = common.sh(cmd)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    timer = os.path.join(work, "timer.py")
    with open(timer, "w") as f:
        f.write(TIMER)

    rows = {}
    for n in (1024, 0):
        r = common.sh([base, str(n), str(a.calls)])
        rows[("cpp", n)] = json.loads(r.stdout)["us_per_call"]
        for kind, where in (("fast_into", fast), ("fast_alloc", fast), ("compat_into", compat),
                            ("compat_alloc", compat), ("ctypes", work), ("torch_add", work)):
            r = common.sh([sys.executable, timer, where, kind, str(n), str(a.calls), lib])
            if r.returncode != 0:
                sys.exit(f"timing {kind} failed:\n{r.stdout}{r.stderr}")
            rows[(kind, n)] = json.loads(r.stdout)["us_per_call"]
    fp = common.fingerprint()
    labels = [("cpp", "C++ calls the launcher (no binding)"),
              ("fast_into", "anvil fast mode, output passed in"),
              ("fast_alloc", "anvil fast mode, output from anvil::empty_like"),
              ("compat_into", "CUDA-Agent mode (pybind11), output passed in"),
              ("compat_alloc", "CUDA-Agent mode (pybind11), torch::empty_like"),
              ("ctypes", "ctypes, output passed in"),
              ("torch_add", "torch.add(x, 1, out=y) (reference)")]
    table = ["# Binding layer cost per call", "",
             f"{fp.get('device', '?')}, driver {fp.get('driver', '?')}, torch {fp['torch']} (CUDA {fp['torch_cuda']}), "
             f"{fp.get('nvcc', '')}, {fp['date']}", "",
             f"Median of 7 repetitions of {a.calls} calls from one process, synchronized at the end; microseconds per call.",
             "", "| call path | 1024 elements (launch) | n = 0 (no launch) | cost over C++ (launch) |",
             "|---|---|---|---|"]
    for key, label in labels:
        over = rows[(key, 1024)] - rows[("cpp", 1024)]
        table.append(f"| {label} | {rows[(key, 1024)]:.2f} | {rows[(key, 0)]:.2f} | "
                     f"{'-' if key == 'cpp' else f'{over:+.2f}'} |")
    table.append("")
    data = {"fingerprint": fp, "calls": a.calls,
            "us_per_call": {f"{k}@{n}": v for (k, n), v in rows.items()}}
    out = a.out or os.path.join(common.ROOT, "bench", "results", "binding-" + fp["date"][:10])
    common.write_results(out, data, "\n".join(table) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
