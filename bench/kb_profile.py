"""Where a KernelBench task's vetting and baselines spend their time, on the GPU host (issue 17).

    python3 bench/kb_profile.py --kernelbench KB --tasks 'level1/1_*' ... [--compile] [--jobs N] --out FILE

One fresh process per task (as `anvil vet` starts one): it reports the seconds of Python's start,
`import torch`, CUDA's start, the task's load, each phase of anvil.vet's Vetting (by wrapping its
methods), and with --compile torch.compile's first call (cold: its caches in a fresh directory)
and eager's steady call. --jobs N runs N tasks at once (what vetting in parallel would gain).
A diagnostic: it decides nothing in anvil.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(path, do_compile, t_spawn):
    t_start = time.time()
    times = {"python_start": t_start - t_spawn}
    t = time.perf_counter()
    import torch
    times["import_torch"] = time.perf_counter() - t
    t = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    times["cuda_init"] = time.perf_counter() - t
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    t = time.perf_counter()
    from anvil import vet
    times["import_anvil"] = time.perf_counter() - t

    phases = {}

    def timed(cls, name):
        fn = getattr(cls, name)

        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                torch.cuda.synchronize()
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0
        setattr(cls, name, wrapper)

    for name in ("setup_device", "load", "too_large", "inputs", "run", "properties", "constant_over_trials"):
        timed(vet.Vetting, name)
    timed(vet, "Observation")
    request = json.dumps({"task_file": path, "device": "cuda", "seed": 0})
    t = time.perf_counter()
    report = vet.vet(request)
    times["vet"] = time.perf_counter() - t
    out = {"task": "/".join(path.split("/")[-2:]), "times": times, "vet_phases": phases,
           "status": report["status"], "flags": [f["flag"] for f in report["flags"]],
           "message": report.get("message", "")[:200],
           "max_mem_gib": torch.cuda.max_memory_allocated() / 2 ** 30}
    if do_compile and report["status"] == "done":
        import importlib.util
        spec = importlib.util.spec_from_file_location("task_mod", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).eval().cuda()
        torch.manual_seed(1)
        with torch.device("cuda"):
            args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in mod.get_inputs()]
        with torch.no_grad():
            for _ in range(3):
                model(*args)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(10):
                model(*args)
            torch.cuda.synchronize()
            out["eager_call_ms"] = (time.perf_counter() - t) * 100
            t = time.perf_counter()
            try:
                compiled = torch.compile(model)
                compiled(*args)
                torch.cuda.synchronize()
                out["compile_first_s"] = time.perf_counter() - t
                t = time.perf_counter()
                for _ in range(10):
                    compiled(*args)
                torch.cuda.synchronize()
                out["compile_call_ms"] = (time.perf_counter() - t) * 100
            except Exception as e:  # noqa: BLE001
                out["compile_error"] = str(e)[:200]
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelbench", required=True)
    ap.add_argument("--tasks", nargs="+", required=True, help="globs under KernelBench/")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache-prefix", default="/tmp/kbprof", help="inductor/triton caches: PREFIX-inductor-N")
    ap.add_argument("--one")
    ap.add_argument("--spawned", type=float)
    a = ap.parse_args()
    if a.one:
        return child(a.one, a.compile, a.spawned)
    paths = []
    for g in a.tasks:
        paths += sorted(glob.glob(os.path.join(a.kernelbench, "KernelBench", g)),
                        key=lambda p: (os.path.dirname(p), int(os.path.basename(p).split("_")[0])))
    t0 = time.time()
    running, rows = [], []
    with open(a.out, "w") as out:
        while paths or running:
            while paths and len(running) < a.jobs:
                p = paths.pop(0)
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR="%s-inductor-%d" % (a.cache_prefix, len(rows + running)),
                           TRITON_CACHE_DIR="%s-triton-%d" % (a.cache_prefix, len(rows + running)))
                cmd = [sys.executable, __file__, "--kernelbench", a.kernelbench, "--tasks", "x", "--out", "-",
                       "--one", p, "--spawned", repr(time.time())] + (["--compile"] if a.compile else [])
                running.append((p, time.time(), subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                                 text=True, env=env)))
            time.sleep(0.05)
            for item in list(running):
                p, started, proc = item
                if proc.poll() is None and time.time() - started < 300:
                    continue
                if proc.poll() is None:
                    proc.kill()
                text = proc.stdout.read().strip().splitlines()
                row = json.loads(text[-1]) if text else {"task": p, "status": "no_report", "code": proc.returncode}
                row["wall_s"] = round(time.time() - started, 2)
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                running.remove(item)
    total = time.time() - t0
    print("%d tasks, jobs %d, %.1f s wall (%.2f s a task)" % (len(rows), a.jobs, total, total / max(1, len(rows))))
    for r in rows:
        ph = r.get("vet_phases", {})
        print("%-42s %5.1fs vet %5.2f | %s | compile %s s" % (
            r["task"][:42], r["wall_s"], r.get("times", {}).get("vet", -1),
            " ".join("%s %.2f" % (k, v) for k, v in sorted(ph.items(), key=lambda kv: -kv[1])[:4]),
            "%.1f" % r["compile_first_s"] if "compile_first_s" in r else r.get("compile_error", "-")[:40]))


if __name__ == "__main__":
    main()
