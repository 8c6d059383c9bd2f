"""A diagnostic for the GPU host: every 0.2 s until killed, one line to stdout:

    MONOTONIC_S ZYGOTES CHILDREN CHILDREN_IN_D_OR_Z NVML_COMPUTE_PROCESSES GIB_USED CPUS_BUSY

(anvil's zygotes, the processes they forked: relays, runners, vettings, warm-ups; NVML's compute
processes and used memory of GPU 0; how many of the machine's CPUs were busy since the last line,
from /proc/stat). The monotonic time is the clock of `anvil baselines --json`'s
origin_monotonic and the judge's clock, so the lines line up with the commands' rows. Decides
nothing in anvil (bench/results/kb-bar-2026-11-28/README.md used it)."""
import ctypes
import os
import time


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _processes():
    """(zygotes, their children, of those in state D or Z)."""
    zygotes = children = stuck = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or b"zygote" not in _cmdline(pid):
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if b"zygote" in _cmdline(parent):
            children += 1
            stuck += state in "DZ"
        else:
            zygotes += 1
    return zygotes, children, stuck


def _cpu_ticks():
    """(busy, all) jiffies of every CPU together."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle and iowait
    return sum(values) - idle, sum(values)


def main():
    cpus = os.cpu_count() or 1
    last = _cpu_ticks()
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        nvml.nvmlInit_v2()
        handle = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
    except OSError:
        nvml = None
    while True:
        t = time.monotonic()
        count, used = -1, -1.0
        if nvml is not None:
            n = ctypes.c_uint(0)
            nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(n), None)
            memory = _Memory()
            nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
            count, used = n.value, memory.used / 2 ** 30
        now = _cpu_ticks()
        busy = cpus * (now[0] - last[0]) / max(1, now[1] - last[1])
        last = now
        print("%.3f %d %d %d %d %.1f %.1f" % ((t,) + _processes() + (count, used, busy)), flush=True)
        time.sleep(max(0.0, 0.2 - (time.monotonic() - t)))


if __name__ == "__main__":
    main()
