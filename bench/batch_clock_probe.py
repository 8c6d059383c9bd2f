#!/usr/bin/env python3
"""Where should the judge's clock stop? A probe of two ways to time a batch of calls that another
process runs on the same GPU (the design question of python/anvil/batch.py), on the GPU host:

    python3 bench/batch_clock_probe.py [--out FILE.json]

A "judge" process hands a "worker" process (spawned, its own CUDA context, as the candidate's
process is) a pool of N fresh input sets behind a gate (a flag word the worker's stream waits on,
as anvil.batch.Gate). The worker enqueues its N calls, then a write of a "done" flag word on its
stream, says `queued` with where its outputs lie, synchronises and answers. Three clocks:

  truth  the worker's own CUDA events around its N calls (what a perfect clock would read)
  host   the judge's wall from handing the pool over to its read of 1024 samples per output after
         the worker's answer, minus the gate (anvil's clock until now)
  gpu    the judge's own stream: inputs copied in, gate flag set, event `ready`; wait for the done
         flag; read the samples; event `end`: elapsed(ready, end)

and, as a control, `truth` again with the judge's stream not waiting (does a waiting stream of
another context slow the worker's kernels?). Prints a table per case (per call, ms) and the ratios
to `truth`.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

CASES = [  # name, elements per input, calls, op
    ("elementwise_1MiB_quick", 256 << 10, 20, "affine"),
    ("elementwise_64MiB", 16 << 20, 100, "affine"),
    ("elementwise_1MiB", 256 << 10, 400, "affine"),
    ("gemm_1024", 1024 * 1024, 60, "gemm"),
]
REPEATS = 5


def _drv():
    from anvil import cuda_ipc

    return cuda_ipc._load()[1]


def write_flag(address, value):
    import torch

    drv = _drv()
    write = getattr(drv, "cuStreamWriteValue32_v2", None) or drv.cuStreamWriteValue32
    rc = write(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), ctypes.c_uint64(address),
               ctypes.c_uint32(value), ctypes.c_uint(0))
    assert rc == 0, rc


def wait_flag(stream, address, value):
    drv = _drv()
    wait = getattr(drv, "cuStreamWaitValue32_v2", None) or drv.cuStreamWaitValue32
    rc = wait(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(address), ctypes.c_uint32(value), ctypes.c_uint(0))
    assert rc == 0, rc


def op(kind, x, w):
    return x * 2 + 1 if kind == "affine" else x.view(1024, -1) @ w


def worker(conn):
    import torch

    from anvil import batch

    torch.cuda.init()
    mapped = batch.Mapped()
    pools = batch.Mapped()
    exporter = None
    while True:
        msg = conn.recv()
        if msg["type"] == "end":
            return
        if msg["type"] == "close":
            pools.close()
            pools = batch.Mapped()
            torch.cuda.empty_cache()
            conn.send({"type": "closed"})
            continue
        flags = mapped.base(msg["flags"])[0]
        pool = batch.device_view(pools.base(msg["pool"])[0], msg["nbytes"])
        numel, n, kind = msg["numel"], msg["calls"], msg["op"]
        w = torch.randn(1024, 1024, device="cuda") if kind == "gemm" else None
        xs = [pool[k * numel * 4:(k + 1) * numel * 4].view(torch.float32) for k in range(n)]
        for _ in range(2):  # warm: outputs allocated, exported once
            outs = [op(kind, x, w) for x in xs]
            torch.cuda.synchronize()
            del outs
        exporter = exporter or batch.Exporter()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if msg["gate"]:
            batch.wait_for_gate(flags, msg["value"])
        start.record()
        outs = [op(kind, x, w) for x in xs]
        end.record()
        if msg["gate"]:
            write_flag(flags + 4, msg["value"])
        dense = {"segs": [], "offs": []}
        for o in outs:
            exporter.note(o, dense)
        conn.send({"type": "queued", "dense": dense, "segments": exporter.segments})
        torch.cuda.synchronize()
        conn.send({"type": "done", "truth_ms": start.elapsed_time(end)})
        del outs, xs, pool


def judge_case(conn, pool, staging, numel, n, kind, value, gpu_clock):
    import torch

    from anvil import batch

    nbytes = n * numel * 4
    flags = judge_case.flags
    stream = torch.cuda.Stream()
    mapped = judge_case.mapped
    positions = torch.randint(0, numel if kind == "affine" else 1024 * 1024, (n, batch.SAMPLES), device="cuda")
    ready, end, start = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    pool.view.fill_(0xFF)
    torch.cuda.synchronize()
    conn.send({"type": "batch", "flags": judge_case.handle, "pool": pool.export(), "nbytes": nbytes, "numel": numel,
               "calls": n, "op": kind, "gate": True, "value": value})
    t0 = time.perf_counter()
    with torch.cuda.stream(stream):
        start.record()
    q = conn.recv()
    assert q["type"] == "queued"
    size_of = 4
    bases = [mapped.base(h)[0] for h in q["segments"]]
    firsts = torch.tensor([bases[s] + o for s, o in zip(q["dense"]["segs"], q["dense"]["offs"])], dtype=torch.int64)
    with torch.cuda.stream(stream):
        addresses = (firsts.to("cuda", non_blocking=True)[:, None] + positions * size_of).reshape(-1)
        pool.view.copy_(staging)
        ready.record()  # before the gate, as anvil.batch.GpuClock (after it, the calls may start first)
        flags.view[:4].view(torch.int32).fill_(value)
        if gpu_clock:
            wait_flag(stream, flags.ptr + 4, value)
            batch._Gather.read(addresses, size_of)
            end.record()
    done = conn.recv()
    answered = time.perf_counter()
    if not gpu_clock:
        with torch.cuda.stream(stream):
            batch._Gather.read(addresses, size_of)
            end.record()
    stream.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    gate = start.elapsed_time(ready)
    row = {"truth_ms": done["truth_ms"], "host_ms": wall - gate, "gate_ms": gate,
           "answer_ms": (answered - t0) * 1e3 - gate}
    if gpu_clock:
        row["gpu_ms"] = ready.elapsed_time(end)
    row["seconds"] = time.perf_counter() - t0
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch

    from anvil import batch

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=worker, args=(there,))
    proc.start()
    torch.cuda.init()
    judge_case.flags = batch.DeviceBuffer(batch.ALIGN)
    judge_case.flags.view.zero_()
    judge_case.handle = judge_case.flags.export()
    judge_case.mapped = batch.Mapped()
    value = 0
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cases": []}
    for name, numel, n, kind in CASES:
        rows = {"gpu": [], "host_only": []}
        pool = batch.DeviceBuffer(n * numel * 4)
        staging = torch.randn(n * numel, device="cuda").view(torch.uint8)
        for rep in range(REPEATS + 1):
            for mode in ("gpu", "host_only"):
                value += 1
                r = judge_case(here, pool, staging, numel, n, kind, value, mode == "gpu")
                print("  ", name, rep, mode, json.dumps({k: round(v, 4) for k, v in r.items()}), flush=True)
                if rep:
                    rows[mode].append(r)
        here.send({"type": "close"})
        assert here.recv()["type"] == "closed"
        pool.free()
        del staging
        torch.cuda.empty_cache()
        med = {m: {k: statistics.median(r[k] for r in rs) / n for k in rs[0]} for m, rs in rows.items()}
        results["cases"].append({"name": name, "calls": n, "rows": rows, "median_per_call": med})
        g, h = med["gpu"], med["host_only"]
        print("%-20s n=%4d truth %.4f | gpu clock %.4f (x%.3f) | host clock %.4f (x%.3f) | truth w/o judge wait %.4f "
              "(x%.3f) | gate %.3f ms" % (name, n, g["truth_ms"], g["gpu_ms"], g["gpu_ms"] / g["truth_ms"],
                                          g["host_ms"], g["host_ms"] / g["truth_ms"], h["truth_ms"],
                                          h["truth_ms"] / g["truth_ms"], g["gate_ms"] * n), flush=True)
    here.send({"type": "end"})
    proc.join(10)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
