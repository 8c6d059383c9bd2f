"""What eager + torch.compile baselines of many KernelBench tasks cost in long-lived processes
(issue 17's 15-minute bar), on the GPU host. A diagnostic: it decides nothing in anvil.

    python3 bench/kb_compile_probe.py --kernelbench KB --tasks 'level1/*' ... --warm-jobs 8 --out FILE

Phase 1 (--warm-jobs N > 0): N processes share the tasks and compile each (torch.compile + one
call) into one inductor cache; nothing is timed. Phase 2: one process, per task: the reference built,
eager timed (10 warm-up, 30 calls, events), torch.compile's first call (warm caches when phase 1
ran), the compiled model timed alike. Each phase's wall time and each task's seconds go to FILE.
"""
import argparse
import gc
import glob
import importlib.util
import json
import os
import subprocess
import sys
import time


def load(path, seed=0):
    import torch

    spec = importlib.util.spec_from_file_location("kbtask", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs()).eval().cuda()
    torch.manual_seed(seed + 1)
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in mod.get_inputs()]
    return model, args


def time_calls(fn, args, warmup=10, calls=30):
    import torch

    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    ms = []
    for _ in range(calls):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2]


def worker(paths, mode):
    import torch
    import torch._dynamo
    import torch._inductor  # noqa: F401

    for p in paths:
        row = {"task": "/".join(p.split("/")[-2:]), "mode": mode}
        t0 = time.perf_counter()
        try:
            model, args = load(p)
            torch.cuda.synchronize()
            row["load_s"] = time.perf_counter() - t0
            with torch.no_grad():
                if mode == "time":
                    t = time.perf_counter()
                    row["eager_ms"] = time_calls(model, args)
                    row["eager_s"] = time.perf_counter() - t
                torch._dynamo.reset()
                t = time.perf_counter()
                compiled = torch.compile(model)
                compiled(*args)
                torch.cuda.synchronize()
                row["compile_first_s"] = time.perf_counter() - t
                if mode == "time":
                    t = time.perf_counter()
                    row["compile_ms"] = time_calls(compiled, args)
                    row["compile_time_s"] = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001
            row["error"] = ("%s: %s" % (type(e).__name__, e))[:200]
        row["total_s"] = time.perf_counter() - t0
        model = args = compiled = None
        gc.collect()
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelbench")
    ap.add_argument("--tasks", nargs="+")
    ap.add_argument("--warm-jobs", type=int, default=0)
    ap.add_argument("--every", type=int, default=1, help="every Nth task")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--warm-only", action="store_true")
    ap.add_argument("--worker", choices=["warm", "time"])
    a = ap.parse_args()
    if a.worker:
        return worker(json.loads(sys.stdin.read()), a.worker)
    paths = []
    for g in a.tasks:
        paths += sorted(glob.glob(os.path.join(a.kernelbench, "KernelBench", g)),
                        key=lambda p: (os.path.dirname(p), int(os.path.basename(p).split("_")[0])))
    paths = paths[a.offset::a.every]
    rows, phases = [], {}

    def run(mode, shares):
        t = time.time()
        procs = []
        for share in shares:
            pr = subprocess.Popen([sys.executable, __file__, "--worker", mode], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            pr.stdin.write(json.dumps(share))
            pr.stdin.close()
            procs.append(pr)
        import selectors
        sel = selectors.DefaultSelector()
        for pr in procs:
            sel.register(pr.stdout, selectors.EVENT_READ, pr)
        live = len(procs)
        while live:
            for key, _ in sel.select():
                line = key.fileobj.readline()
                if not line:
                    sel.unregister(key.fileobj)
                    key.data.wait()
                    live -= 1
                elif line.startswith("{"):
                    rows.append(json.loads(line))
                    print(line.strip(), flush=True)
        phases[mode] = time.time() - t
        print(json.dumps({"phase": mode, "s": phases[mode]}), flush=True)

    if a.warm_jobs:
        run("warm", [paths[i::a.warm_jobs] for i in range(a.warm_jobs)])
    if not a.warm_only:
        run("time", [paths])
    with open(a.out, "w") as f:
        f.write(json.dumps({"tasks": len(paths), "warm_jobs": a.warm_jobs, "phases_s": phases}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    timed = [r for r in rows if r["mode"] == "time"] or rows
    cf = sorted(r.get("compile_first_s", 0) for r in timed)
    tot = sorted(r["total_s"] for r in timed)
    print("tasks %d warm_jobs %d phases %s" % (len(paths), a.warm_jobs, {k: round(v, 1) for k, v in phases.items()}))
    print("time phase per task: p50 %.2f p90 %.2f max %.2f s; compile first call p50 %.2f p90 %.2f; errors %d"
          % (tot[len(tot) // 2], tot[int(len(tot) * 0.9)], tot[-1], cf[len(cf) // 2], cf[int(len(cf) * 0.9)],
             sum(1 for r in rows if "error" in r)))
    for r in sorted(timed, key=lambda r: -r["total_s"])[:8]:
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}))


if __name__ == "__main__":
    main()
