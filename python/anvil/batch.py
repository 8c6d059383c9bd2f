"""The judge's clock: a batch of calls on fresh, secret inputs, timed by the judge from outside the
candidate's process (docs/anti-hacking.md, "Time the judge can vouch for").

The judge draws N input sets from seeds only it knows (get_inputs() with the device as torch's
default device where the task allows), lays them out in one pool of memory that nobody else has
seen, and starts its clock as it hands the pool over: on a GPU a fresh cudaMalloc exported through
CUDA IPC (the other process maps it only then), on the CPU a sealed memfd. The candidate's process
runs the N calls back to back, keeps every output, and answers with them: on a GPU as CUDA IPC
references (nothing is copied), on the CPU in a sealed memfd. On a GPU the judge then reads
SAMPLES elements of every output of every call, at positions it drew in secret, and its clock stops
when those reads are complete. Work the candidate left running after it answered either finished
before the reads (and is inside the clock) or is missing from what was read (a wrong sample). So
the clock's time per call is an upper bound of the candidate's real time per call, whatever its
process says, and the outputs are checked for every call: at the sampled positions for all of
them, in full for FULL_CHECKS calls chosen after the batch, against the judge's own reference on
its pristine copy of the inputs (which also shows an input the candidate modified).

anvil computes the reward from these walls (src/anvil/env/eval.cpp): the eager reference runs
the same batch in the same process before the candidate's code is imported, and the candidate's
claimed speed-up is never believed beyond its batch's speed-up over eager's (plus a slack).
"""
import ctypes
import math
import random

TARGET_MS = 25.0     # a batch is sized to last about this long (the per-batch overhead is ~0.5 ms)
MIN_CALLS = 2
MAX_CALLS = 4096
MAX_SPEEDUP = 50     # a batch is sized for a candidate at most this much faster than the reference
SAMPLES = 1024       # elements read from each output tensor of every call
FULL_CHECKS = 2      # calls whose outputs are compared in full, chosen after the batch
MEMORY_SHARE = 0.5   # of the device's free memory (the host's available memory on the CPU)
ALIGN = 256


class BatchError(Exception):
    """The batch cannot be run for this task (its inputs cannot be laid out, no memory, ...)."""


def _runtime():
    from anvil import cuda_ipc

    rt, drv = cuda_ipc._load()
    if rt is None:
        raise BatchError("the CUDA runtime is not loaded in this process")
    return rt


class _Raw:
    """A CUDA array interface over a raw device pointer (torch.as_tensor makes a view of it)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3}


def device_view(ptr, nbytes):
    """A uint8 CUDA tensor over [ptr, ptr + nbytes) (no copy, no ownership)."""
    import torch

    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8, device="cuda")
    return torch.as_tensor(_Raw(ptr, nbytes), device="cuda")


class DeviceBuffer:
    """A cudaMalloc of its own: never a block of torch's caching allocator, whose segment may hold
    the judge's other tensors, which CUDA IPC would then hand over with it."""

    def __init__(self, nbytes):
        self.rt = _runtime()
        self.nbytes = max(int(nbytes), 1)
        ptr = ctypes.c_void_p()
        rc = self.rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes))
        if rc != 0:
            self.rt.cudaGetLastError()
            raise BatchError("cudaMalloc(%d bytes) failed: %s" % (self.nbytes, self.rt.cudaGetErrorString(rc).decode()))
        self.ptr = ptr.value
        self.view = device_view(self.ptr, self.nbytes)

    def export(self):
        from anvil import cuda_ipc

        handle = cuda_ipc._Handle()
        rc = self.rt.cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(self.ptr))
        if rc != 0:
            self.rt.cudaGetLastError()
            raise BatchError("cudaIpcGetMemHandle failed: %s" % self.rt.cudaGetErrorString(rc).decode())
        return bytes(handle.reserved).hex()

    def free(self):
        if self.ptr is not None:
            self.view = None
            self.rt.cudaDeviceSynchronize()
            self.rt.cudaFree(ctypes.c_void_p(self.ptr))
            self.ptr = None


# ---------------------------------------------------------------------------------------------
# Layout: every call's arguments, tensors as regions of one pool

def _storage_span(t):
    """Elements of t's storage that t reaches from its offset (0 for an empty tensor)."""
    if t.numel() == 0:
        return 0
    if any(s < 0 for s in t.stride()):
        raise BatchError("an input tensor with a negative stride")
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _skeleton(value, regions, offset, depth=0):
    """(skeleton, offset): value's JSON picture, every tensor a {"__pool__": ...} region at offset
    (regions collects (tensor, region)); raises BatchError for what cannot be described."""
    import torch

    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor:
            raise BatchError("an input is a %s (a torch.Tensor subclass)" % type(value).__name__)
        span = _storage_span(value)
        offset = (offset + ALIGN - 1) // ALIGN * ALIGN
        region = {"offset": offset, "dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                  "stride": list(value.stride()), "span": span}
        regions.append((value, region))
        return {"__pool__": region}, offset + span * value.element_size()
    if value is None or type(value) in (bool, int, str):
        return value, offset
    if type(value) is float:
        return (value if math.isfinite(value) else {"__float__": repr(value)}), offset
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).replace("torch.", "")}, offset
    if depth < 16 and type(value) in (list, tuple):
        items = []
        for v in value:
            item, offset = _skeleton(v, regions, offset, depth + 1)
            items.append(item)
        return (items if type(value) is list else {"__tuple__": items}), offset
    if depth < 16 and type(value) is dict and all(type(k) is str for k in value):
        out = {}
        for k, v in value.items():
            out[k], offset = _skeleton(v, regions, offset, depth + 1)
        return {"__dict__": out}, offset
    raise BatchError("an input of type %s cannot be handed to another process" % type(value).__name__)


def rebuild(skeleton, region_view):
    """Arguments from a layout skeleton; region_view(region) -> the tensor of a region."""
    if isinstance(skeleton, list):
        return [rebuild(v, region_view) for v in skeleton]
    if isinstance(skeleton, dict):
        if "__pool__" in skeleton:
            return region_view(skeleton["__pool__"])
        if "__tuple__" in skeleton:
            return tuple(rebuild(v, region_view) for v in skeleton["__tuple__"])
        if "__dict__" in skeleton:
            return {k: rebuild(v, region_view) for k, v in skeleton["__dict__"].items()}
        if "__float__" in skeleton:
            return float(skeleton["__float__"])
        if "__dtype__" in skeleton:
            import torch

            return getattr(torch, skeleton["__dtype__"])
    return skeleton


def region_tensor(base, region):
    """The tensor a region describes, as a view of `base` (a uint8 tensor of the whole pool)."""
    import torch

    dtype = getattr(torch, region["dtype"], None)
    if not isinstance(dtype, torch.dtype):
        raise BatchError("unknown dtype %r" % region["dtype"])
    size = torch.empty(0, dtype=dtype).element_size()
    start, span = int(region["offset"]), int(region["span"])
    if start < 0 or start % size or start + span * size > base.numel():
        raise BatchError("a region lies outside the pool")
    flat = base[start:start + span * size].view(dtype)
    return flat.as_strided(region["shape"], region["stride"])


def lay_out(calls):
    """(skeletons, regions, total bytes) for a list of argument lists."""
    regions, skeletons, offset = [], [], 0
    for args in calls:
        skeleton, offset = _skeleton(list(args), regions, offset)
        skeletons.append(skeleton)
    return skeletons, regions, (offset + ALIGN - 1) // ALIGN * ALIGN


def fill(base, regions):
    """Copy every input tensor into its region of `base`."""
    import torch

    for t, region in regions:
        if region["span"] == 0:
            continue
        size = t.element_size()
        src = torch.as_strided(t, (region["span"],), (1,), t.storage_offset())
        base[region["offset"]:region["offset"] + region["span"] * size].copy_(src.reshape(-1).view(torch.uint8))


# ---------------------------------------------------------------------------------------------
# Sizing

def calls_for(per_call_ms, call_bytes, device, reference_ms=None):
    """How many calls make a batch of TARGET_MS, within MIN_CALLS..MAX_CALLS, the memory a batch
    may take (call_bytes: what one call holds: its inputs twice, the pool and the judge's pristine
    copy, and its outputs) and, given the reference's time per call, a candidate at most
    MAX_SPEEDUP times faster (a claim of less buys a shorter batch, never a longer one)."""
    if reference_ms and reference_ms > 0:
        per_call_ms = max(per_call_ms or 0, reference_ms / MAX_SPEEDUP)
    n = MAX_CALLS if not per_call_ms or per_call_ms <= 0 else int(math.ceil(TARGET_MS / per_call_ms))
    n = max(MIN_CALLS, min(MAX_CALLS, n))
    room = free_memory(device) * MEMORY_SHARE
    if call_bytes > 0:
        n = min(n, max(1, int(room // call_bytes)))
    return n


def free_memory(device):
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4 << 30


def secret_seeds(n):
    rng = random.SystemRandom()
    return [rng.randrange(1 << 31) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Reading the candidate's outputs back

class Remote:
    """A CUDA tensor of the other process, not copied: where it lies (anvil.channel, lazy)."""

    def __init__(self, handle, offset, dtype, shape):
        self.handle = handle
        self.offset = offset
        self.dtype = dtype
        self.shape = shape

    def numel(self):
        return int(math.prod(self.shape))


def draw_positions(n_calls, numel, generator):
    """(n_calls, SAMPLES) int64 flat positions in [0, numel), or None for an empty output."""
    import torch

    if numel <= 0:
        return None
    count = min(SAMPLES, numel)
    return torch.randint(0, numel, (n_calls, count), generator=generator, dtype=torch.int64)


class Mapped:
    """The other process's allocations, mapped once each (by handle) and kept until close()."""

    def __init__(self):
        self.rt = None
        self.maps = {}  # handle hex -> (ptr, size)

    def base(self, handle):
        if handle not in self.maps:
            from anvil import cuda_ipc

            self.rt = self.rt or _runtime()
            raw = bytes.fromhex(handle)
            if len(raw) != 64:
                raise BatchError("a CUDA IPC handle of %d bytes" % len(raw))
            h = cuda_ipc._Handle()
            ctypes.memmove(ctypes.addressof(h), raw, 64)
            ptr = ctypes.c_void_p()
            rc = self.rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), h, 1)
            if rc != 0:
                self.rt.cudaGetLastError()
                raise BatchError("cudaIpcOpenMemHandle failed: %s" % self.rt.cudaGetErrorString(rc).decode())
            _rt, drv = cuda_ipc._load()
            found = cuda_ipc._range(drv, ptr.value)
            size = found[1] - (ptr.value - found[0]) if found else 0
            self.maps[handle] = (ptr.value, size)
        return self.maps[handle]

    def tensor(self, remote):
        """A view of a Remote tensor in the mapped allocation; raises BatchError when it does not
        lie inside it."""
        import torch

        dtype = getattr(torch, remote.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise BatchError("unknown dtype %r" % remote.dtype)
        ptr, size = self.base(remote.handle)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        nbytes = remote.numel() * itemsize
        if remote.offset < 0 or remote.offset % itemsize or remote.offset + nbytes > size:
            raise BatchError("an output lies outside the memory its process exported")
        return device_view(ptr + remote.offset, nbytes).view(dtype).view(remote.shape)

    def close(self):
        if self.rt is not None:
            for ptr, _size in self.maps.values():
                self.rt.cudaIpcCloseMemHandle(ctypes.c_void_p(ptr))
        self.maps.clear()


def sample(outputs, plan, mapped):
    """{(call, leaf): values at the positions}: every tensor leaf of every call's output (outputs[k]:
    [(name, leaf)]), read where it lies (a Remote through `mapped`, grouped so that one gather runs
    per allocation and dtype; a local tensor directly). plan[j] = (numel, positions): leaf j's
    expected element count and its (calls, SAMPLES) positions; a leaf of another size is skipped
    here (its shape is wrong, which the full comparison reports)."""
    import torch

    found = {}
    groups = {}  # (handle, dtype) -> [(call, leaf, element offset, positions row)]
    for k, out in enumerate(outputs):
        for j, (_name, leaf) in enumerate(out):
            if j >= len(plan) or plan[j][1] is None or not hasattr(leaf, "numel") or leaf.numel() != plan[j][0]:
                continue
            row = plan[j][1][k]
            if isinstance(leaf, Remote):
                itemsize = torch.empty(0, dtype=getattr(torch, leaf.dtype)).element_size()
                groups.setdefault((leaf.handle, leaf.dtype), []).append((k, j, leaf.offset // itemsize, row))
            else:
                found[(k, j)] = leaf.reshape(-1)[row]
    for (handle, dtype_name), rows in groups.items():
        dtype = getattr(torch, dtype_name)
        ptr, size = mapped.base(handle)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        whole = device_view(ptr, size - size % itemsize).view(dtype)
        index = torch.cat([row + start for _k, _j, start, row in rows])
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= whole.numel()):
            raise BatchError("an output lies outside the memory its process exported")
        values = whole[index.to(whole.device, non_blocking=True)]
        at = 0
        for k, j, _start, row in rows:
            found[(k, j)] = values[at:at + row.numel()]
            at += row.numel()
    return found


def compare_samples(got, expected, tolerance):
    """How many sampled elements are wrong (got and expected: 1-D, the same positions), with the
    first bad one: (count, (index, got, expected)) or (0, None). Non-finite expected values are
    the task's business and skipped; a non-finite got never passes; integers compare exactly."""
    import torch

    from anvil import compare

    exp = expected.to(got.device)
    if got.dtype != exp.dtype or got.shape != exp.shape:
        return got.numel(), (0, "dtype %s" % compare.dtype_name(got.dtype), "dtype %s" % compare.dtype_name(exp.dtype))
    if not got.is_floating_point():
        bad = got != exp
    else:
        atol, rtol, _norm = compare.tolerance_for(tolerance, exp.dtype) or (0.0, 0.0, None)
        g, e = got.double(), exp.double()
        bad = ~torch.isfinite(g) | ((g - e).abs() > atol + rtol * e.abs())
        bad &= torch.isfinite(e)
    count = int(bad.sum())
    if not count:
        return 0, None
    i = int(bad.nonzero()[0, 0])
    return count, (i, got[i].item(), exp[i].item())
