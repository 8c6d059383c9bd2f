#!/usr/bin/env python3
"""Which CUDA driver calls wait on another GPU of the same host (issue 24):

    python3 bench/driver_ops_probe.py [--reps 40] [--out F.json]

An evaluation on GPU 0 slows down when GPU 1's processes make and destroy CUDA contexts
(bench/results/multi-gpu-2026-11-27: the driver serialises that host-wide). This times, on GPU 0,
each driver call an evaluation's processes make (libcuda through ctypes, no torch in the timed
process): a context's creation and destruction, device memory of three sizes, pinned host memory,
a stream, an inter-process event, and the opening and closing of another process's allocations
(CUDA IPC, as the judge maps the candidate's outputs), under three conditions of GPU 1:
- alone: nothing;
- ctx_loop: one process making and destroying GPU 1's primary context in a loop;
- proc_loop: two loops each starting a torch process that takes 1 GiB on GPU 1 and exits (what an
  evaluation's processes do to the driver, without anvil).
Each operation's median and p90 in milliseconds, per condition; the ratio to alone says which calls
take the host-wide lock. Standard library only in this process (torch only in the background loads).
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CTX_LOOP = ("import ctypes\ncu=ctypes.CDLL('libcuda.so.1')\nassert cu.cuInit(0)==0\nd=ctypes.c_int()\n"
            "assert cu.cuDeviceGet(ctypes.byref(d),0)==0\nc=ctypes.c_void_p()\n"
            "while True:\n    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(c),d)==0\n"
            "    cu.cuDevicePrimaryCtxRelease(d)\n")
PROC_LOOP = "while true; do python3 -c \"import torch; x=torch.empty(1<<28, device='cuda'); torch.cuda.synchronize()\"; done"

# A child on GPU 0 that owns N allocations and prints their IPC handles (hex), then waits for stdin to close.
EXPORTER = r"""
import ctypes, sys
cu = ctypes.CDLL('libcuda.so.1')
assert cu.cuInit(0) == 0
d = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(d), 0) == 0
c = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d) == 0
assert cu.cuCtxSetCurrent(c) == 0
sizes = [int(s) for s in sys.argv[1:]]
out = []
for s in sizes:
    p = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(s)) == 0
    h = (ctypes.c_ubyte * 64)()
    assert cu.cuIpcGetMemHandle(h, p) == 0
    out.append(bytes(h).hex())
print(" ".join(out), flush=True)
sys.stdin.read()
"""


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class Driver:
    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.ok(self.cu.cuInit(0), "cuInit")
        self.dev = ctypes.c_int()
        self.ok(self.cu.cuDeviceGet(ctypes.byref(self.dev), 0), "cuDeviceGet")
        self.ctx = None

    @staticmethod
    def ok(rc, what):
        if rc != 0:
            raise RuntimeError("%s: CUDA driver error %d" % (what, rc))

    def retain(self):
        c = ctypes.c_void_p()
        self.ok(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), self.dev), "cuDevicePrimaryCtxRetain")
        self.ok(self.cu.cuCtxSetCurrent(c), "cuCtxSetCurrent")
        # The primary context is made lazily by the first call that needs it: make it now.
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.ok(self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        self.ctx = c

    def release(self):
        self.ok(self.cu.cuDevicePrimaryCtxRelease(self.dev), "cuDevicePrimaryCtxRelease")
        self.ctx = None


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    out.sort()
    return {"median_ms": round(statistics.median(out), 3), "p90_ms": round(out[int(0.9 * (len(out) - 1))], 3),
            "max_ms": round(out[-1], 3)}


def measure(reps):
    d = Driver()
    cu = d.cu
    rows = {}

    made, ended = [], []

    def ctx_cycle():
        t0 = time.perf_counter()
        d.retain()
        t1 = time.perf_counter()
        d.release()
        made.append(1000 * (t1 - t0))
        ended.append(1000 * (time.perf_counter() - t1))

    # A context's life: its creation (retain + first use) and destruction, as one pair and each.
    rows["context_create_destroy"] = timed(ctx_cycle, max(5, reps // 4))
    rows["context_create"] = {"median_ms": round(statistics.median(made), 3)}
    rows["context_destroy"] = {"median_ms": round(statistics.median(ended), 3)}
    d.retain()
    for name, size in (("mem_alloc_free_2MiB", 2 << 20), ("mem_alloc_free_256MiB", 256 << 20),
                       ("mem_alloc_free_4GiB", 4 << 30)):
        def alloc_free(size=size):
            p = ctypes.c_uint64()
            d.ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), "cuMemAlloc")
            d.ok(cu.cuMemFree_v2(p), "cuMemFree")
        rows[name] = timed(alloc_free, reps)

    def host_alloc():
        p = ctypes.c_void_p()
        d.ok(cu.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(64 << 20), 0), "cuMemHostAlloc")
        d.ok(cu.cuMemFreeHost(p), "cuMemFreeHost")
    rows["pinned_alloc_free_64MiB"] = timed(host_alloc, reps)

    def stream():
        s = ctypes.c_void_p()
        d.ok(cu.cuStreamCreate(ctypes.byref(s), 1), "cuStreamCreate")
        d.ok(cu.cuStreamDestroy_v2(s), "cuStreamDestroy")
    rows["stream_create_destroy"] = timed(stream, reps)

    def ipc_event():
        e = ctypes.c_void_p()
        d.ok(cu.cuEventCreate(ctypes.byref(e), 0x2 | 0x4), "cuEventCreate")  # disable timing | interprocess
        h = (ctypes.c_ubyte * 64)()
        d.ok(cu.cuIpcGetEventHandle(h, e), "cuIpcGetEventHandle")
        d.ok(cu.cuEventDestroy_v2(e), "cuEventDestroy")
    rows["ipc_event_create_destroy"] = timed(ipc_event, reps)

    sizes = [2 << 20] * reps + [256 << 20] * reps
    child = subprocess.Popen([sys.executable, "-c", EXPORTER] + [str(s) for s in sizes], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    handles = child.stdout.readline().split()
    for name, hs in (("ipc_open_close_2MiB", handles[:reps]), ("ipc_open_close_256MiB", handles[reps:])):
        it = iter(hs)

        def open_close():
            h = Handle.from_buffer_copy(bytes.fromhex(next(it)))
            p = ctypes.c_uint64()
            d.ok(cu.cuIpcOpenMemHandle_v2(ctypes.byref(p), h, 1), "cuIpcOpenMemHandle")  # the handle by value
            d.ok(cu.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle")
        rows[name] = timed(open_close, reps)
    child.stdin.close()
    child.wait()
    d.release()
    return rows


def background(kind):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="1")
    if kind == "ctx_loop":
        return [subprocess.Popen([sys.executable, "-c", CTX_LOOP], env=env, start_new_session=True)]
    if kind == "proc_loop":
        return [subprocess.Popen(["bash", "-c", PROC_LOOP], env=env, start_new_session=True) for _ in range(2)]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--conditions", default="alone,ctx_loop,proc_loop,alone")
    ap.add_argument("--out")
    a = ap.parse_args()
    from common import fingerprint, in_fork
    doc = {"fingerprint": in_fork(fingerprint), "reps": a.reps, "conditions": []}  # torch kept out of this process
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # this process and its exporter: GPU 0 only
    for cond in a.conditions.split(","):
        procs = background(cond)
        if procs:
            time.sleep(5.0)
        rows = measure(a.reps)
        for p in procs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
        doc["conditions"].append({"condition": cond, "ops": rows})
        print(cond, " ".join("%s=%.2f" % (k, v["median_ms"]) for k, v in rows.items()), file=sys.stderr, flush=True)
        time.sleep(1.0)
    text = json.dumps(doc, indent=1)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
