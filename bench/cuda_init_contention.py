"""How much two processes starting CUDA at once slow each other (why the candidate's process of a
defended evaluation creates its CUDA context only after the judge's: docs/anti-hacking.md).

    python3 bench/cuda_init_contention.py      # on the GPU host

Forks processes from one that imported torch without touching CUDA (as anvil's zygote does) and
times, in each: CUDA context creation, the first cuBLAS GEMM, the first cuDNN convolution. Modes:
one process alone; two at once; two staggered (the second starts its context when the first's is
up). Each mode twice; seconds printed per process.
"""
import json
import os
import time

import torch  # imported before fork, CUDA untouched

START = 0.0


def work(tag, wait_fd=None, signal_fd=None):
    """One process's start: CUDA context, first GEMM, first convolution (seconds each)."""
    t0 = time.perf_counter()
    if wait_fd is not None:
        os.read(wait_fd, 1)
    t1 = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    if signal_fd is not None:
        os.write(signal_fd, b"1")
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    torch.nn.functional.conv2d(torch.randn(8, 3, 64, 64, device="cuda"), torch.randn(16, 3, 3, 3, device="cuda"))
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    return {"tag": tag, "wait": round(t1 - t0, 3), "context": round(t2 - t1, 3), "cublas": round(t3 - t2, 3),
            "cudnn": round(t4 - t3, 3), "end": round(t4 - START, 3)}


def run(mode):
    """Fork one process (alone) or two (together, staggered); each reports its times on a pipe."""
    global START
    r, w = os.pipe()
    res_r, res_w = os.pipe()
    START = time.perf_counter()
    pids = []
    for i in range(1 if mode == "alone" else 2):
        pid = os.fork()
        if pid == 0:
            kw = {}
            if mode == "staggered":
                kw = {"signal_fd": w} if i == 0 else {"wait_fd": r}
            os.write(res_w, (json.dumps(work("p%d" % i, **kw)) + "\n").encode())
            os._exit(0)
        pids.append(pid)
    for p in pids:
        os.waitpid(p, 0)
    os.close(res_w)
    data = b""
    while True:
        chunk = os.read(res_r, 65536)
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.decode().splitlines()]


if __name__ == "__main__":
    for mode in ["alone", "together", "staggered"] * 2:
        print(mode, run(mode), flush=True)
        time.sleep(0.5)
