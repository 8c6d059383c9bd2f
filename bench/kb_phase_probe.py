"""Where a baseline's seconds go on the GPU: CUDA's start, torch.compile's first call (profiled with
cProfile), and eager / compiled timed by anvil.timing.measure with and without torch.profiler
(its start, calls, stop and trace reading apart), with each way's spread. A diagnostic for issue
17; it decides nothing in anvil.

    PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 bench/kb_phase_probe.py --kernelbench KB \
        --tasks level1/21_Sigmoid.py,level3/36_LSTMHn.py --out DIR

Each task runs three times in a child forked from a parent that imported what anvil's zygote
imports (see main's rounds).
"""
import argparse
import importlib.util
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def spread(r):
    return round((r["p75_ms"] - r["p25_ms"]) / r["median_ms"], 4) if r.get("median_ms") else None


def timed(label, row, fn):
    t = time.perf_counter()
    out = fn()
    row[label + "_s"] = round(time.perf_counter() - t, 4)
    return out


def child(path, out_dir, rnd, calls, time_modes):
    import torch
    from anvil import timing

    name = os.path.basename(path)[:-3]
    row = {"task": "/".join(path.split("/")[-2:]), "round": rnd}
    timed("cuda_init", row, lambda: torch.empty(1, device="cuda"))
    spec = importlib.util.spec_from_file_location("kbtask", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = timed("build", row, lambda: mod.Model(*mod.get_init_inputs()).eval())
    model = timed("to_device", row, lambda: model.cuda())
    sets = []
    for s in (1, 2):
        torch.manual_seed(s)
        with torch.device("cuda"):
            args = mod.get_inputs()
        sets.append(tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args))
    torch.cuda.synchronize()
    with torch.no_grad():
        compiled = timing.compiled(torch, model, "default")
        before = set(sys.modules)
        t = time.perf_counter()
        compiled(*sets[0])
        torch.cuda.synchronize()
        row["compile_first_call_s"] = round(time.perf_counter() - t, 4)
        row["lazy_modules"] = sorted(set(sys.modules) - before)
        if not time_modes:
            return row
        for label, fn in (("eager", model), ("compiled", compiled)):
            for mode in ("plain", "ksum", "inspected"):
                trace = {} if mode == "inspected" else None
                r = timed("%s_%s" % (label, mode), row, lambda: timing.measure(
                    fn, sets, "cuda", warmup=5, calls=calls, kernel_sum=(mode != "plain"), trace=trace))
                row["%s_%s_median_ms" % (label, mode)] = round(r["median_ms"], 4)
                row["%s_%s_spread" % (label, mode)] = spread(r)
                row["%s_%s_late" % (label, mode)] = r.get("late_calls")
                row["%s_%s_host_ms" % (label, mode)] = r.get("host_enqueue_ms")
                if r.get("kernel_sum_ms") is not None:
                    row["%s_%s_kernel_sum_ms" % (label, mode)] = round(r["kernel_sum_ms"], 4)
                if trace is not None:
                    row["%s_%s_phases" % (label, mode)] = {k: round(v, 3) for k, v in trace.get("seconds", {}).items()}
                    row["%s_%s_kernels" % (label, mode)] = len(trace.get("kernels", []))
                    row["%s_%s_cpu_ops" % (label, mode)] = len(trace.get("cpu_ops", []))
                    row["%s_%s_markers" % (label, mode)] = trace.get("markers")
    return row


def fork_child(path, out_dir, rnd, calls, time_modes, t):
    start = time.perf_counter()
    row = common.in_fork(child, path, out_dir, rnd, calls, time_modes)
    row.setdefault("task", t)
    row.setdefault("round", rnd)
    row["child_wall_s"] = round(time.perf_counter() - start, 3)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelbench", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import torch
    from anvil import zygote

    # Rounds 1 (inductor's caches warmed; the modules each compilation imports: head's
    # lazy_modules, what python/anvil/compile_modules.txt lists) and 2 (measured, and each model
    # timed every way) fork from a parent with the zygote's imports but not its _warm_compiler;
    # round 3 forks after it (its children's lazy_modules: what the file missed).
    warm = zygote._warm_compiler
    zygote._warm_compiler = lambda: None
    t0 = time.perf_counter()
    zygote._import_compiler(torch)
    head = {"import_compiler_s": round(time.perf_counter() - t0, 3)}
    import anvil.timing  # noqa: F401
    rows, lazy = [], set()
    tasks = a.tasks.split(",")
    for rnd in (1, 2, 3):
        if rnd == 3:
            t0 = time.perf_counter()
            warm()
            head["warm_compiler_s"] = round(time.perf_counter() - t0, 3)
            head["cuda_initialized_after_warm"] = torch.cuda.is_initialized()
            head["children_have_cuda"] = zygote._children_have_cuda(torch)
            head["lazy_modules"] = sorted(lazy)
            print(json.dumps(head), flush=True)
        for t in tasks:
            row = fork_child(os.path.join(a.kernelbench, "KernelBench", t), a.out, rnd, a.calls, rnd == 2, t)
            lazy.update(m for m in row.get("lazy_modules", ()) if rnd < 3)
            if rnd == 3 or "error" in row:
                row_print = row
            else:
                row_print = {k: v for k, v in row.items() if k != "lazy_modules"}
                row_print["lazy_module_count"] = len(row.get("lazy_modules", ()))
            rows.append(row)
            print(json.dumps(row_print), flush=True)
    with open(os.path.join(a.out, "phases.jsonl"), "w") as f:
        f.write(json.dumps(head) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")
    for rnd in (2, 3):
        print("round %d compile first call: %s" % (rnd, ", ".join(
            "%s %.2f" % (r["task"].split("/")[-1][:18], r.get("compile_first_call_s", -1)) for r in rows if r["round"] == rnd)))


if __name__ == "__main__":
    main()
