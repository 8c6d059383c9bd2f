"""Whether a zygote may import torch._inductor and still fork children that have CUDA, and what
torch.compile's first call costs in such a child (cold and warm inductor caches). A diagnostic for
issue 17; it decides nothing in anvil.

    PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 bench/kb_fork_compile_probe.py --kernelbench KB --every 10 \
        [--threads 1] --out FILE
"""
import argparse
import glob
import importlib.util
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def child(path, threads):
    import torch

    row = {"task": "/".join(path.split("/")[-2:]), "bad_fork": torch._C._cuda_isInBadFork()}
    t0 = time.perf_counter()
    try:
        if threads:
            import torch._inductor.config as cfg
            cfg.compile_threads = threads
        spec = importlib.util.spec_from_file_location("kbtask", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).eval().cuda()
        torch.manual_seed(1)
        with torch.device("cuda"):
            args = mod.get_inputs()
        args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
        torch.cuda.synchronize()
        row["setup_s"] = time.perf_counter() - t0
        with torch.no_grad():
            t = time.perf_counter()
            compiled = torch.compile(model)
            compiled(*args)
            torch.cuda.synchronize()
            row["compile_first_s"] = time.perf_counter() - t
    except Exception as e:  # noqa: BLE001
        row["error"] = ("%s: %s" % (type(e).__name__, e))[:200]
    row["child_s"] = time.perf_counter() - t0
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelbench", required=True)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t = time.perf_counter()
    import torch
    import torch._dynamo  # noqa: F401
    import torch._inductor  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.async_compile  # noqa: F401
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError:
        pass
    head = {"import_s": time.perf_counter() - t, "cuda_initialized": torch.cuda.is_initialized(),
            "nvml_check": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"), "threads": a.threads}
    paths = []
    for lv in ("level1", "level2", "level3"):
        paths += sorted(glob.glob(os.path.join(a.kernelbench, "KernelBench", lv, "*.py")),
                        key=lambda p: int(os.path.basename(p).split("_")[0]))
    paths = paths[a.offset::a.every]
    rows = []
    for rnd in ("cold", "warm"):
        for p in paths:
            t = time.perf_counter()
            row = common.in_fork(child, p, a.threads)
            row.setdefault("task", p)
            row["round"] = rnd
            row["fork_wall_s"] = time.perf_counter() - t
            rows.append(row)
            print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    with open(a.out, "w") as f:
        f.write(json.dumps(head) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(json.dumps(head))
    for rnd in ("cold", "warm"):
        c = sorted(r.get("compile_first_s", 99) for r in rows if r["round"] == rnd)
        w = sorted(r["fork_wall_s"] for r in rows if r["round"] == rnd)
        print("%s: compile first call p50 %.2f p90 %.2f; child wall p50 %.2f p90 %.2f; bad forks %d; errors %d" % (
            rnd, c[len(c) // 2], c[int(len(c) * .9)], w[len(w) // 2], w[int(len(w) * .9)],
            sum(1 for r in rows if r["round"] == rnd and r.get("bad_fork")),
            sum(1 for r in rows if r["round"] == rnd and "error" in r)))


if __name__ == "__main__":
    main()
