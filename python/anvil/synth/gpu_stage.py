"""python -m anvil.synth.gpu_stage TASKS.parquet|TASKS.jsonl --out DIR: anvil synth's tasks on a GPU, at full
size: eager and torch.compile (inductor) run, the output bitwise the same twice, the eager
runtime measured and kept within the paper's 1-100 ms; `anvil vet` on a seeded sample.

Processes compile in parallel (inductor's code generation is the slow part); the timing is done
holding an exclusive lock, one process at a time, so no compile or launch of another process runs
beside a measurement. Each task's record is a line of DIR/gpu.jsonl as soon as it is done;
DIR/gpu-summary.json is the counts. --budget-s stops taking tasks once that long has passed
(what is done is kept).

This is the first version of the GPU stage: a script run on the GPU host, not yet part of `anvil
synth`'s run (docs/synth.md).
"""
import argparse
import fcntl
import json
import multiprocessing as mp
import os
import queue as queue_module
import random
import statistics
import sys
import tempfile
import time

from anvil.synth.filters import load_module, outputs

from anvil.synth.compose import WINDOW_MS  # noqa: E402 - one home for the paper's window
WARMUP, CALLS = 3, 10


def _time(fn, args, torch):
    for _ in range(WARMUP):
        fn(*args)
    if not torch.cuda.is_available() or not any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        times = []
        for _ in range(CALLS):  # the CPU (a test of this script): wall time
            t = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(CALLS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check(row, lock_path, torch, device="cuda"):
    rec = {"index": row["index"], "ops": row["ops"], "estimate_ms": row["estimate_ms"], "status": "rejected"}
    t0 = time.perf_counter()
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        module = load_module(row["code"], "gpu_%d" % row["index"])
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs()).eval().to(device)
        torch.manual_seed(1)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        with torch.no_grad():
            eager = outputs(model(*inputs), torch)
            torch.manual_seed(0x5EED)
            again = outputs(model(*inputs), torch)
            if not all(torch.equal(a, b) for a, b in zip(eager, again)):
                rec["reason"] = "deterministic"
                return rec
            if not all(bool(torch.isfinite(t).all()) for t in eager):
                rec["reason"] = "eager"
                rec["detail"] = "NaN or Inf at full size"
                return rec
            compiled = torch.compile(model)
            tc = time.perf_counter()
            got = outputs(compiled(*inputs), torch)
            rec["compile_s"] = round(time.perf_counter() - tc, 2)
            diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(got, eager))
            rec["compile_max_abs_diff"] = diff
            if not all(torch.allclose(a, b, atol=1e-2, rtol=1e-2) for a, b in zip(got, eager)):
                rec["reason"] = "compile"
                rec["detail"] = "torch.compile's output differs from eager's by %.3g" % diff
                return rec
            with open(lock_path, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    rec["eager_ms"] = _time(model, inputs, torch)
                    rec["compile_ms"] = _time(compiled, inputs, torch)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        rec["measured_over_estimate"] = rec["eager_ms"] / row["estimate_ms"]
        if not WINDOW_MS[0] <= rec["eager_ms"] <= WINDOW_MS[1]:
            rec["reason"] = "runtime"
            rec["detail"] = "eager %.3g ms, outside %g-%g ms" % (rec["eager_ms"], *WINDOW_MS)
            return rec
        rec["status"] = "accepted"
        return rec
    except Exception as e:  # noqa: BLE001 - the task's failure is its record
        rec["reason"] = "error"
        rec["detail"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
        return rec
    finally:
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        if device == "cuda":
            torch.cuda.empty_cache()


def vet_one(row, torch, device="cuda"):
    from anvil import vet

    fd, path = tempfile.mkstemp(suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(row["code"])
    try:
        report = vet.vet(json.dumps({"task_file": path, "device": device, "seed": 0}))
    finally:
        os.unlink(path)
    out = {"index": row["index"], "vet_status": report.get("status"), "flags": [f["flag"] for f in report.get("flags", [])],
           "message": report.get("message", "")}
    try:  # and the sample's determinism at full size: two models, two calls, the generator moved between
        module = load_module(row["code"], "det_%d" % row["index"])
        got = []
        for reseed in (0, 0x5EED):
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs()).eval().to(device)
            torch.manual_seed(1)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
            torch.manual_seed(reseed)
            with torch.no_grad():
                got.append(outputs(model(*inputs), torch))
            del model, inputs
        out["deterministic"] = all(torch.equal(a, b) for a, b in zip(*got))
    except Exception as e:  # noqa: BLE001
        out["deterministic"] = None
        out["determinism_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    return out


def worker(queue, results, lock_path, deadline, device):
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    while True:
        item = queue.get()
        if item is None or time.time() > deadline:
            results.put(None)
            return
        kind, row = item
        results.put(check(row, lock_path, torch, device) if kind == "check" else vet_one(row, torch, device))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.synth.gpu_stage")
    ap.add_argument("tasks")
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--procs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--vet-sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script on small tasks")
    args = ap.parse_args(argv)
    if args.tasks.endswith(".jsonl"):  # a GPU host without pyarrow: the rows as JSON lines
        with open(args.tasks, encoding="utf-8") as f:
            table = [json.loads(line) for line in f if line.strip()]
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(args.tasks, columns=["index", "ops", "code", "estimate_ms"]).to_pylist()
    rng = random.Random(args.seed)
    checks = table[:args.limit]
    vets = rng.sample(table, min(args.vet_sample, len(table)))
    os.makedirs(args.out, exist_ok=True)
    ctx = mp.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    # the checks first, then the vettings: vet's kernels run beside the last measurements only
    items = [("check", r) for r in checks] + [("vet", r) for r in vets]
    for it in items:
        queue.put(it)
    for _ in range(args.procs):
        queue.put(None)
    deadline = time.time() + args.budget_s
    lock_path = os.path.join(args.out, "timing.lock")
    procs = [ctx.Process(target=worker, args=(queue, results, lock_path, deadline, args.device)) for _ in range(args.procs)]
    for p in procs:
        p.start()
    done, finished = [], 0
    t0 = time.time()
    with open(os.path.join(args.out, "gpu.jsonl"), "w") as f:
        while finished < args.procs:
            try:
                r = results.get(timeout=30)
            except queue_module.Empty:
                alive = [p for p in procs if p.is_alive()]
                if not alive or time.time() > deadline + 60:  # dead, or a task hung past the budget
                    for p in alive:
                        p.terminate()
                    break
                continue
            if r is None:
                finished += 1
                continue
            done.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
    for p in procs:
        p.join()
    checked = [r for r in done if "status" in r]
    vetted = [r for r in done if "vet_status" in r]
    ratios = sorted(r["measured_over_estimate"] for r in checked if "measured_over_estimate" in r)
    reasons = {}
    for r in checked:
        if r["status"] != "accepted":
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    summary = {
        "tasks_file": args.tasks, "wall_s": round(time.time() - t0, 1), "procs": args.procs,
        "checked": len(checked), "accepted": sum(r["status"] == "accepted" for r in checked), "rejected": reasons,
        "eager_ms_median": statistics.median([r["eager_ms"] for r in checked if "eager_ms" in r]) if ratios else None,
        "measured_over_estimate": {"median": statistics.median(ratios), "p10": ratios[len(ratios) // 10],
                                   "p90": ratios[len(ratios) * 9 // 10]} if ratios else None,
        "vetted": len(vetted), "vet_flagged": [r for r in vetted if r["flags"]],
        "sample_nondeterministic": [r for r in vetted if r.get("deterministic") is False],
        "sample_determinism_errors": [r for r in vetted if r.get("deterministic") is None],
        "vet_errors": [r for r in vetted if r["vet_status"] != "done"],
    }
    import torch

    summary["device"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    summary["torch"] = torch.__version__
    summary["cuda"] = torch.version.cuda
    with open(os.path.join(args.out, "gpu-summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    lists = ("vet_flagged", "vet_errors", "sample_nondeterministic", "sample_determinism_errors")
    print(json.dumps({k: v for k, v in summary.items() if k not in lists}))
    print("sample of %d: vet flagged %d, vet errors %d, non-deterministic %d, determinism errors %d" % (
        len(vetted), *(len(summary[k]) for k in lists)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
