#!/usr/bin/env python3
"""Facts the judge's clock rests on, measured on a GPU host (docs/anti-hacking.md, "Time the judge
can vouch for").

    python3 bench/probe_judge_clock.py [--out FILE.json]

Two processes forked before CUDA starts, as the judge and the candidate's process are:
  ipc_open     the importer's cudaIpcOpenMemHandle of a fresh allocation, by size (the candidate's
               first touch of a batch's input pool lies inside the judge's clock);
  round_trip   a SOCK_SEQPACKET message and its answer between the two;
  gather       the judge reading 1024 random elements from each of K allocations mapped through IPC;
  exporter_kill  whether memory stays readable by the importer after the exporter is SIGKILLed;
  timeslice    how long a tiny kernel of one process waits while the other runs a 200 ms kernel
               (the time-slicing between two CUDA contexts).
"""
import argparse
import ctypes
import json
import os
import signal
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


class Raw:
    """A CUDA array interface over a raw device pointer: torch.as_tensor makes a view, no copy."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3}


def send(sock, obj):
    sock.send(json.dumps(obj).encode())


def recv(sock):
    return json.loads(sock.recv(1 << 20).decode())


def child(sock):
    import torch

    from anvil import cuda_ipc

    torch.cuda.init()
    torch.ones(1, device="cuda")
    rt, drv = cuda_ipc._load()
    while True:
        msg = recv(sock)
        kind = msg["kind"]
        if kind == "open":
            handle = cuda_ipc._Handle()
            ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(msg["handle"]), 64)
            ptr = ctypes.c_void_p()
            t0 = time.perf_counter()
            rc = rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), handle, 1)
            t1 = time.perf_counter()
            view = torch.as_tensor(Raw(ptr.value, msg["nbytes"]), device="cuda")
            s = float(view[:: max(1, msg["nbytes"] // 4096)].float().sum())
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            del view
            rc2 = rt.cudaIpcCloseMemHandle(ptr)
            t3 = time.perf_counter()
            send(sock, {"rc": rc, "rc_close": rc2, "open_ms": (t1 - t0) * 1e3, "view_read_ms": (t2 - t1) * 1e3,
                        "close_ms": (t3 - t2) * 1e3, "sum": s})
        elif kind == "ping":
            send(sock, {"kind": "pong"})
        elif kind == "keep_open":
            handle = cuda_ipc._Handle()
            ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(msg["handle"]), 64)
            ptr = ctypes.c_void_p()
            rc = rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), handle, 1)
            child.kept = (ptr.value, msg["nbytes"])
            send(sock, {"rc": rc})
        elif kind == "read_kept":
            ptr, n = child.kept
            try:
                view = torch.as_tensor(Raw(ptr, n), device="cuda")
                s = int(view[:1024].long().sum())
                torch.cuda.synchronize()
                send(sock, {"ok": True, "sum": s})
            except Exception as e:  # noqa: BLE001
                send(sock, {"ok": False, "error": str(e)[:300]})
        elif kind == "sleep":
            torch.cuda._sleep(int(msg["cycles"]))
            send(sock, {"kind": "sleeping"})
            torch.cuda.synchronize()
            send(sock, {"kind": "slept"})
        elif kind == "export":
            t = torch.full((msg["nbytes"],), 7, dtype=torch.uint8, device="cuda")
            child.held = t
            torch.cuda.synchronize()
            send(sock, cuda_ipc.export(t))
        elif kind == "exit":
            os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        a.close()
        child(b)
    b.close()
    import torch

    from anvil import cuda_ipc

    torch.ones(1, device="cuda")
    rt, drv = cuda_ipc._load()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    # round trip
    rts = []
    for _ in range(2000):
        t0 = time.perf_counter()
        send(a, {"kind": "ping"})
        recv(a)
        rts.append((time.perf_counter() - t0) * 1e6)
    result["round_trip_us"] = {"median": statistics.median(rts), "p99": sorted(rts)[int(0.99 * len(rts))]}

    # ipc open of fresh allocations
    opens = {}
    for size in (1 << 20, 64 << 20, 1 << 30, 8 << 30):
        rows = []
        for _ in range(5):
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            torch.cuda.synchronize()
            e = cuda_ipc.export(t)
            t0 = time.perf_counter()
            send(a, {"kind": "open", "handle": e["handle"], "nbytes": size})
            r = recv(a)
            r["total_ms"] = (time.perf_counter() - t0) * 1e3
            rows.append(r)
            del t
            torch.cuda.empty_cache()
        opens[str(size)] = {k: statistics.median([r[k] for r in rows]) for k in ("open_ms", "view_read_ms", "close_ms", "total_ms")}
        opens[str(size)]["rc"] = [r["rc"] for r in rows]
    result["ipc_open"] = opens

    # gather: the judge maps K allocations of the other process and reads 1024 random elements of each
    gathers = {}
    for k in (4, 32, 128):
        handles = []
        for _ in range(k):
            send(a, {"kind": "export", "nbytes": 4 << 20})
            handles.append(recv(a))
        t0 = time.perf_counter()
        views = []
        for h in handles:
            handle = cuda_ipc._Handle()
            ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(h["handle"]), 64)
            ptr = ctypes.c_void_p()
            rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), handle, 1)
            views.append(torch.as_tensor(Raw(ptr.value + h["offset"], 4 << 20), device="cuda"))
        t1 = time.perf_counter()
        idx = torch.randint(0, 4 << 20, (1024,), device="cuda")
        picked = [v[idx] for v in views]
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        picked = [v[idx] for v in views]
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        gathers[str(k)] = {"open_ms": (t1 - t0) * 1e3, "first_gather_ms": (t2 - t1) * 1e3,
                           "second_gather_ms": (t3 - t2) * 1e3}
    result["gather"] = gathers

    # time slicing: the child runs a 200 ms kernel; we time tiny kernels meanwhile
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles_per_ms = 10_000_000 / start.elapsed_time(end)
    send(a, {"kind": "sleep", "cycles": int(200 * cycles_per_ms)})
    recv(a)  # sleeping
    waits = []
    x = torch.ones(1, device="cuda")
    t_end = time.perf_counter() + 0.4
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        waits.append((time.perf_counter() - t0) * 1e3)
    recv(a)  # slept
    result["timeslice"] = {"tiny_kernels": len(waits), "max_wait_ms": max(waits),
                           "median_wait_ms": statistics.median(waits),
                           "waits_over_1ms": sum(1 for w in waits if w > 1.0)}

    # exporter killed: does the importer keep the memory?
    pid2 = pid
    # reversed roles: the child exports, we keep it open, the child is killed
    send(a, {"kind": "export", "nbytes": 64 << 20})
    h = recv(a)
    handle = cuda_ipc._Handle()
    ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(h["handle"]), 64)
    ptr = ctypes.c_void_p()
    rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), handle, 1)
    view = torch.as_tensor(Raw(ptr.value + h["offset"], 64 << 20), device="cuda")
    before = int(view[:1024].long().sum())
    os.kill(pid2, signal.SIGKILL)
    os.waitpid(pid2, 0)
    time.sleep(0.5)
    try:
        after = int(view[:1024].long().sum())
        torch.cuda.synchronize()
        result["exporter_kill"] = {"before": before, "after": after, "readable": True}
    except Exception as ex:  # noqa: BLE001
        result["exporter_kill"] = {"before": before, "readable": False, "error": str(ex)[:300]}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
