"""Does a wave that starts CUDA beside a timed model move that model's times? (issue 18)

The GPU's lock (python/anvil/timing.py GpuLock) keeps a wave's preparation off the GPU while a
member of the previous wave is timed. Most of that preparation is CUDA's start in the judge's and
the candidate's processes (a wave of 4: 8 contexts, serialised by the driver; the judge's clocks in
bench/results/multi-gpu-2026-11-28-overlap). This times models the way the judge does
(anvil.timing.measure: L2 flush, launch hidden behind a GPU sleep, CUDA events) in this process,
while other processes, forked from workers that imported torch (as anvil's zygote forks its
runners), do one of:

  quiet  nothing
  start  start CUDA (torch.cuda.init, a first allocation, mem_get_info) and then stay idle,
         holding their context: the next wave's start, pipelined
  churn  start CUDA and exit at once (context creation and teardown, back to back)
  prep   start CUDA, copy 256 MiB to the GPU and run a few matrix products and a convolution
         (what the rest of a wave's preparation does: the reference placed and called)

The modes alternate within each round, so drift over the run falls on all of them alike. For each
model and mode: the median over rounds of each measurement's median, its ratio to quiet, and the
worst single measurement's ratio. Writes a JSON document (--out) and prints a table.

    python3 bench/prep_interference.py --out DIR [--rounds 5] [--seconds 8] [--workers 4]
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

MODES = ("quiet", "start", "churn", "prep")


def _child(mode, ready):
    import torch

    t0 = time.perf_counter()
    torch.cuda.init()
    x = torch.empty(1 << 20, device="cuda")
    torch.cuda.mem_get_info()
    torch.cuda.synchronize()
    started = time.perf_counter() - t0
    if mode == "prep":
        host = torch.randn(64 << 20)  # 256 MiB
        d = host.to("cuda")
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.half)
        for _ in range(3):
            a = (a @ a).clamp_(-1, 1)
        conv = torch.nn.Conv2d(64, 64, 3).cuda()
        conv(torch.randn(16, 64, 128, 128, device="cuda"))
        torch.cuda.synchronize()
        del d
    os.write(ready, b"%.4f\n" % started)
    if mode == "churn":
        os._exit(0)
    del x
    signal.pause()


def _worker(mode, stop, log_path):
    """Forks a child at a time (CUDA never started in this process): each starts CUDA; the next is
    forked once it has. Held children stay until stop is set."""
    children = []
    with open(log_path, "a") as log:
        while not stop.is_set():
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    _child(mode, w)
                finally:
                    os._exit(0)
            os.close(w)
            with os.fdopen(r) as f:
                line = f.readline().strip()
            if line:
                log.write("%s %s\n" % (mode, line))
            if mode == "churn":
                os.waitpid(pid, 0)
            else:
                children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)


def _serve(modes, stop, done, log_path):
    """A worker's life: started before the measuring process starts CUDA (a fork of a process with
    CUDA started cannot start it again), it runs each mode it is sent until stop is set."""
    import torch  # noqa: F401 - imported before the forks, as the zygote does

    while True:
        mode = modes.get()
        if mode is None:
            return
        _worker(mode, stop, log_path)
        done.put(mode)


def models(torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)

    def sets(make, n=3):
        return [make() for _ in range(n)]

    tiny = sets(lambda: (torch.randn(4096, device="cuda", generator=g),))
    elem = sets(lambda: (torch.randn(64 << 20, device="cuda", generator=g),), 2)
    h = sets(lambda: (torch.randn(4096, 4096, device="cuda", generator=g, dtype=torch.half),
                      torch.randn(4096, 4096, device="cuda", generator=g, dtype=torch.half)))
    f = sets(lambda: (torch.randn(4096, 4096, device="cuda", generator=g),
                      torch.randn(4096, 4096, device="cuda", generator=g)), 2)
    sm = sets(lambda: (torch.randn(8192, 8192, device="cuda", generator=g),), 2)
    return {
        "add_4k": (lambda x: x + 1, tiny),
        "relu_256MiB": (torch.relu, elem),
        "softmax_8k": (lambda x: torch.softmax(x, -1), sm),
        "matmul_fp16_4k": (torch.matmul, h),
        "matmul_fp32_4k": (torch.matmul, f),
    }


def measure_for(seconds, table, timing, torch):
    out = {name: [] for name in table}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, (fn, sets) in table.items():
            with torch.no_grad():
                r = timing.measure(fn, sets, "cuda", warmup=5, calls=30, kernel_sum=False)
            out[name].append({"median_ms": r["median_ms"], "min_ms": r["min_ms"], "max_ms": r["max_ms"],
                              "late_calls": r.get("late_calls", 0)})
    return out


def fingerprint(torch):
    import subprocess

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = None
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": torch.cuda.get_device_name(),
            "driver": driver, "torch": torch.__version__, "cuda": torch.version.cuda, "host_cores": os.cpu_count()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, "starts.log")
    open(log_path, "w").close()
    ctx = mp.get_context("fork")
    stop, done = ctx.Event(), ctx.Queue()
    queues = [ctx.Queue() for _ in range(args.workers)]
    pool = [ctx.Process(target=_serve, args=(q, stop, done, log_path), daemon=True) for q in queues]
    for w in pool:  # before this process starts CUDA
        w.start()

    import torch

    from anvil import timing

    table = models(torch)
    measure_for(2.0, table, timing, torch)  # warm: cuBLAS's handles, the kernels loaded
    rng = random.Random(0)
    runs = []
    for rnd in range(args.rounds):
        order = list(MODES)
        rng.shuffle(order)
        for mode in order:
            stop.clear()
            busy = mode != "quiet"
            for q in queues if busy else []:
                q.put(mode)
            time.sleep(1.0 if busy else 0)  # the first contexts starting
            got = measure_for(args.seconds, table, timing, torch)
            stop.set()
            for _ in queues if busy else []:
                done.get(timeout=120)
            runs.append({"round": rnd, "mode": mode, "models": got})
            print("round %d %-5s %s" % (rnd, mode, " ".join("%s %.4f" % (n, statistics.median(
                m["median_ms"] for m in v)) for n, v in got.items())), flush=True)
    for q in queues:
        q.put(None)
    for w in pool:
        w.join(30)
    starts = {}
    with open(log_path) as f:
        for line in f:
            mode, s = line.split()
            starts.setdefault(mode, []).append(float(s))
    summary = {}
    for name in table:
        per = {}
        for mode in MODES:
            meds = [m["median_ms"] for r in runs if r["mode"] == mode for m in r["models"][name]]
            late = sum(m["late_calls"] for r in runs if r["mode"] == mode for m in r["models"][name])
            per[mode] = {"median_ms": statistics.median(meds), "measurements": len(meds),
                         "p10_ms": sorted(meds)[len(meds) // 10], "p90_ms": sorted(meds)[(9 * len(meds)) // 10],
                         "max_ms": max(meds), "late_calls": late}
        q = per["quiet"]["median_ms"]
        for mode in MODES:
            per[mode]["vs_quiet"] = round(per[mode]["median_ms"] / q, 4)
            per[mode]["p90_vs_quiet"] = round(per[mode]["p90_ms"] / per["quiet"]["p90_ms"], 4)
            per[mode]["max_vs_quiet_median"] = round(per[mode]["max_ms"] / q, 4)
        summary[name] = per
    doc = {"fingerprint": fingerprint(torch), "rounds": args.rounds, "seconds": args.seconds,
           "workers": args.workers, "summary": summary,
           "context_starts": {m: {"count": len(v), "median_s": statistics.median(v), "max_s": max(v)}
                              for m, v in starts.items()},
           "runs": runs}
    with open(os.path.join(args.out, "prep_interference.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("\n%-16s %-6s %10s %8s %8s %8s %6s" % ("model", "mode", "median_ms", "vs_quiet", "p90/q", "max/q", "late"))
    for name, per in summary.items():
        for mode in MODES:
            p = per[mode]
            print("%-16s %-6s %10.4f %8.4f %8.4f %8.4f %6d" % (name, mode, p["median_ms"], p["vs_quiet"],
                                                           p["p90_vs_quiet"], p["max_vs_quiet_median"],
                                                           p["late_calls"]))
    for m, v in doc["context_starts"].items():
        print("context starts (%s): %d, median %.3f s, max %.3f s" % (m, v["count"], v["median_s"], v["max_s"]))


if __name__ == "__main__":
    main()
