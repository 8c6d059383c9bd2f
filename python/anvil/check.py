"""A quick correctness and speed check of one built candidate against its task.

    python -m anvil.check --task TASK.py --candidate DIR [--device cuda|cpu]

Prints one JSON object. This is the demo's check, run in a subprocess per
candidate so a crashing kernel only ends that subprocess; the protected,
isolated evaluator with the reward is `anvil eval` (issue 3's evaluation core).
"""
import argparse
import json
import os
import runpy
import sys
import time


def _time(fn, inputs, device, iters):
    import torch

    fn(*inputs)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    else:
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    out = {"task": a.task, "candidate": a.candidate, "device": a.device}
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    stage = "task"
    try:
        task = runpy.run_path(a.task)
        stage = "load"
        sys.path.insert(0, os.path.abspath(a.candidate))
        new_mod = runpy.run_path(os.path.join(a.candidate, "model_new.py"))
        torch.manual_seed(0)
        init = task["get_init_inputs"]()
        ref = task["Model"](*init).to(a.device).eval()
        new = new_mod["ModelNew"](*init).to(a.device).eval()
        new.load_state_dict(ref.state_dict(), strict=True)
        stage = "run"
        with torch.no_grad():
            torch.manual_seed(1)
            inputs = [x.to(a.device) if isinstance(x, torch.Tensor) else x for x in task["get_inputs"]()]
            expected = ref(*inputs)
            got = new(*inputs)
            if a.device == "cuda":
                torch.cuda.synchronize()
            err = (got.double() - expected.double()).abs()
            out["max_abs_err"] = float(err.max())
            ok = got.shape == expected.shape and bool(torch.isfinite(got).all()) and torch.allclose(
                got, expected, atol=a.tol, rtol=a.tol)
            out["outcome"] = "ok" if ok else "wrong_answer"
            out["candidate_ms"] = _time(new, inputs, a.device, a.iters)
            out["eager_ms"] = _time(ref, inputs, a.device, a.iters)
            out["speedup"] = out["eager_ms"] / out["candidate_ms"] if out["candidate_ms"] > 0 else None
    except Exception as e:  # reported, never a bare traceback
        out["outcome"] = {"task": "task_error", "load": "load_error", "run": "runtime_error"}[stage]
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
