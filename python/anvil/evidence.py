"""Evidence the judge gathers beside the outputs (docs/anti-hacking.md, "Outcomes and reasons"):
the kernels a candidate's modules hold (cuobjdump), the device's speed of light (measured peaks),
the precision of an output against a float64 reference, and the NaN sentinel of unwritten memory.
Pure helpers: the judge decides what they mean.
"""
import math
import os
import shutil
import subprocess
import time

from anvil import output_compare, policy
from anvil.harness import tensor_pairs

PRECISION_FLOOR = {"float32": 2.0 ** -14, "float64": 2.0 ** -40}
LOWER = {"float64": ("float32", "float16", "bfloat16"), "float32": ("float16", "bfloat16"),
         "float16": (), "bfloat16": ()}


def sentinel_count(got, expected):
    """Elements of got whose bytes are all 0xFF (the sentinel of fresh memory) where expected is
    finite."""
    import torch

    if got.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16) or got.shape != expected.shape:
        return 0
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    bits = got.contiguous().view(ints)
    hit = (bits == -1) if ints is not torch.uint8 else (bits == 255)
    finite = torch.isfinite(expected.to(got.device))
    return int((hit & finite).sum().item())


def floating_leaves(got_value, expected_value):
    """(name, got, expected) for every pair of tensors at the same place of both values."""
    import torch

    out = []
    for name, got, exp in tensor_pairs(got_value, expected_value, "output"):
        if isinstance(got, torch.Tensor) and isinstance(exp, torch.Tensor):
            out.append((name, got, exp))
    return out


def find_cuobjdump(hint=None):
    candidates = [hint, shutil.which("cuobjdump")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "cuobjdump"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump"))
    candidates.append("/usr/local/cuda/bin/cuobjdump")
    try:
        import triton

        candidates.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    except Exception:  # noqa: BLE001
        pass
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _entry_symbols(path, cuobjdump):
    """Mangled names of the kernels (entry functions) in one shared object, through cuobjdump;
    remembered in $ANVIL_CACHE/kernel-names by the file's content hash."""
    import hashlib
    import json

    cache = None
    if os.environ.get("ANVIL_CACHE"):
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            cache = os.path.join(os.environ["ANVIL_CACHE"], "kernel-names", digest[:2], digest + ".json")
            with open(cache) as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    try:
        out = subprocess.run([cuobjdump, "-symbols", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    names = [line.split()[-1] for line in out.stdout.splitlines() if "STO_ENTRY" in line]
    if cache is not None and out.returncode == 0:
        try:
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            tmp = "%s.%d.tmp" % (cache, os.getpid())
            with open(tmp, "w") as f:
                json.dump(names, f)
            os.replace(tmp, cache)
        except OSError:
            pass
    return names


def kernel_names(modules, cuobjdump):
    """Demangled and base names of the GPU kernels (entry functions) in the given shared objects."""
    mangled = []
    for path in modules:
        mangled += _entry_symbols(path, cuobjdump)
    names = set(mangled)
    filt = shutil.which("c++filt")
    if mangled and filt:
        try:
            out = subprocess.run([filt], input="\n".join(mangled), capture_output=True, text=True, timeout=60)
            names.update(line.strip() for line in out.stdout.splitlines() if line.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    names.update(policy.base_name(n) for n in list(names))
    return names


def best_seconds(fn, runs=4):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def measure_bandwidth(device):
    """The device's copy bandwidth in bytes/s (read and write counted), best of a few 1 GiB copies."""
    import torch

    n = 1 << 28
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * n / best_seconds(lambda: dst.copy_(src))


def measure_flops(device):
    """The device's dense bf16 matmul rate in flop/s, best of a few 8192^3 products."""
    import torch

    m = 8192
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    return 2 * m ** 3 / best_seconds(lambda: torch.mm(a, b))


def float64_run(model, args):
    """`model`'s output on `args` computed in float64: a copy of the model in double, every float
    input in double (others cloned), under no_grad; the caller synchronises. Raises what the model
    raises (a model that does not run in float64)."""
    import copy

    import torch

    from anvil.harness import map_tensors

    model64 = copy.deepcopy(model).double()
    args64 = map_tensors(args, lambda t: t.double() if t.is_floating_point() else t.clone())
    with torch.no_grad():
        return model64(*args64)


def precision_bound(leaves, ratio):
    """The float64 run is needed only when the candidate's output is far from the reference's.
    With d = |g - e| / |e| (candidate g, reference e, relative L2) at most a quarter of the floor
    F, and r the float64 result: |g - r| <= d |e| + |e - r| and |e| <= (1 + err_r) |r|, so
    err_c <= F/4 (1 + err_r) + err_r, which is at most F when err_r <= F/2 and below
    2 err_r otherwise: within the limit max(ratio * err_r, F) for any ratio >= 2. d is computed
    in the output's own dtype and must be under F/8, which leaves room for its rounding. Returns
    the numbers, or None when the bound does not hold (then the float64 run decides)."""
    if ratio < 2:
        return None
    worst = None
    for name, g, e in leaves:
        if tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
            return None
        diff = g - e
        num, den = float((diff * diff).sum()), float((e * e).sum())
        if not (den > 0 and math.isfinite(den) and math.isfinite(num)):
            return None
        d = math.sqrt(num / den)
        bound = PRECISION_FLOOR[output_compare.dtype_name(e.dtype)] / 8
        if not d <= bound:
            return None
        if worst is None or d > worst[1]:
            worst = (name, d, bound)
    return {"checked": True, "by": "bound", "output": worst[0], "difference": worst[1], "bound": worst[2]}


def precision_against(leaves, out64, ratio):
    """The worst output's error against the float64 reference `out64`, relative to the limit
    max(ratio * the reference's own error, the floor)."""
    by_name = {n: t for n, t, _ in tensor_pairs(out64, out64, "output")}
    worst = None
    for name, g, e in leaves:
        r = by_name.get(name)
        if r is None or tuple(r.shape) != tuple(g.shape):
            continue
        r = r.to(g.device)  # a deferred check holds the candidate's output on the host
        norm = r.double().norm().item()
        if not norm or not math.isfinite(norm):
            continue
        err_c = (g.double() - r).norm().item() / norm
        err_r = (e.double() - r).norm().item() / norm
        limit = max(ratio * err_r, PRECISION_FLOOR[output_compare.dtype_name(e.dtype)])
        entry = {"output": name, "candidate_error": err_c, "reference_error": err_r, "limit": limit}
        if worst is None or err_c / limit > worst["candidate_error"] / worst["limit"]:
            worst = entry
    return dict(worst or {}, checked=worst is not None)


def others_beside(pids, me, mine, parked):
    """(how many of NVML's `pids` are other processes' contexts than this one's, as which numbers
    NVML gave). `mine`: this evaluation's other pids (its candidate's process); `parked`: idle
    contexts of measurements parked on the GPU's lock (timing.parked_contexts), taken off what can
    be theirs only. Where NVML names this process by this PID namespace's number, the other
    namespaces' contexts are those listed under numbers not this evaluation's (0, or none at all,
    as the driver does it); else every number is the host's and all but this one are others."""
    if me in pids:
        ours = set(mine) | {me}
        foreign = [p for p in pids if p not in ours]
        return len(pids) - 1 - len(foreign) + max(0, len(foreign) - parked), "this namespace's numbers"
    return max(0, len(pids) - 1 - parked), "the host's numbers"


def gpu_process_pids(device):
    """The pids NVML lists with a compute context on `device` (as NVML numbers them: the host's,
    or this PID namespace's where the driver translates them), or None when NVML cannot tell."""
    import ctypes

    import torch

    class Info(ctypes.Structure):  # nvmlProcessInfo_v2_t, the _v3 call's
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        uuid = "GPU-%s" % torch.cuda.get_device_properties(device).uuid
        if nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle)) != 0:
            return None
        for _ in range(4):  # the list may grow between the calls
            count = ctypes.c_uint(64)
            infos = (Info * 128)()  # room for 64 entries of up to twice this layout's size
            rc = nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), infos)
            if rc == 0:  # NVML_SUCCESS
                return [int(infos[i].pid) for i in range(min(int(count.value), 64))]
            if rc != 7:  # NVML_ERROR_INSUFFICIENT_SIZE: more than 64
                return None
        return None
    except (OSError, AttributeError, RuntimeError):
        return None


def run_queue_ns(pids):
    """{tid: nanoseconds it has spent runnable but waiting for a CPU} for the threads of `pids`
    (the second field of /proc/<pid>/task/<tid>/schedstat); None when the kernel does not say.
    Over a measurement, its growth divided by the wall time is how much the machine's load
    delayed it: a baseline measured with a large share is not kept."""
    waits, seen = {}, False
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    waits[(pid, tid)] = int(f.read().split()[1])
                seen = True
            except (OSError, ValueError, IndexError):
                continue
    return waits if seen else None


class RunQueue:
    """How long, since it was made, the threads of `pids` waited for a CPU (run_queue_ns): each
    thread's growth, a thread started since counted whole (a thread that ended meanwhile takes its
    share with it)."""

    def __init__(self, pids):
        self.pids = [p for p in pids if p]
        self.start_ns = run_queue_ns(self.pids)
        self.start = time.perf_counter()

    def load(self):
        """{"run_queue_ms": waited, "run_queue_share": waited / wall time}, or Nones when the kernel
        does not say."""
        end_ns = run_queue_ns(self.pids)
        wall = time.perf_counter() - self.start
        if self.start_ns is None or end_ns is None or wall <= 0:
            return {"run_queue_ms": None, "run_queue_share": None}
        waited = sum(max(0, ns - self.start_ns.get(tid, 0)) for tid, ns in end_ns.items()) / 1e9
        return {"run_queue_ms": round(waited * 1e3, 4), "run_queue_share": round(waited / wall, 4)}
