"""The judge's clock: a batch of calls on fresh, secret inputs, timed by the judge from outside the
candidate's process (docs/anti-hacking.md, "Time the judge can vouch for").

The judge draws N input sets from a seed only it knows (get_inputs() with the device as torch's
default device where the task allows), lays them out in one pool of memory that nobody else has
seen, and hands it over. On a GPU the pool is a cudaMalloc of the judge's own (a Room: made once
per evaluation, exported through CUDA IPC once) filled with NaN, and the batch is timed on the
judge's own GPU clock (GpuClock): the candidate's process makes its stream wait for a gate flag,
enqueues its N calls and then a write of a done flag on that stream, and says `queued` with where
its outputs lie; the judge's own stream then copies the inputs in, records `ready`, sets the gate
flag, waits for the done flag, reads SAMPLES elements of every output of every call at positions it
drew in secret, and records `end`. elapsed(ready, end) / N is the time per call. Nothing of it is
the candidate's word: no output can be right before its inputs exist (after `ready`), and `end`
comes after the judge's own read of the outputs, so a done flag raised early only has the judge
read outputs not yet written (a wrong sample). The host's work on either side (Python, launches,
messages, allocations) lies outside the clock, so a batch of about TARGET_MS is tight (a probe on
an H100: 0.3 ms over the kernels' own time, bench/results/batch-clock-probe-2026-11-25.json). On
the CPU the pool is a sealed memfd and the clock is the judge's wall from handing it over to the
candidate's answer.

The outputs are checked for every call: at the sampled positions for all of them, in full for
FULL_CHECKS calls chosen after the batch, against the judge's own reference on its pristine copy of
the inputs (which also shows an input the candidate modified).

anvil computes the reward from these times (src/anvil/env/reward.h): the eager reference runs the
same batch in the same process before the candidate's code is imported, and the candidate's
claimed speed-up is never believed beyond its batch's speed-up over eager's (plus a slack). A stall
of the machine only ever lengthens a batch: while the fastest of the candidate's timed batches
would hold its claim down, the judge times another, each checked as the first, up to
TIMED_BATCHES, and keeps the fastest.
"""
import ctypes
import math
import os
import random

from anvil import share

TARGET_MS = 10.0     # a candidate's batch is sized to last about this long (the GPU clock's fixed cost: ~0.3 ms on an H100)
MIN_CALLS = 2
MAX_CALLS = 256      # the judge draws, and runs the reference on, every call's inputs: its host work grows with N
# Eager's batch is longer: the clock's fixed cost weighs on a batch's time per call as (fixed cost) / N,
# and a candidate whose claim buys a longer batch than eager's would gain eager's share of it (up to
# 3% at TARGET_MS). At EAGER_TARGET_MS that share is under 1%; where eager's batch is capped at
# MAX_CALLS the candidate's is too, and can be no longer. Eager's batch runs once per task (cached).
EAGER_TARGET_MS = 40.0


def target_ms(kind):
    """How long a batch of `kind` ("eager" or "candidate") is sized to last."""
    return EAGER_TARGET_MS if kind == "eager" else TARGET_MS

MAX_SPEEDUP = 50     # a batch is sized for a candidate at most this much faster than the reference
SAMPLES = 1024       # elements read from each output tensor of every call
FULL_CHECKS = 2      # calls whose outputs are compared in full, chosen after the batch
TIMED_BATCHES = 3    # the candidate's timed batches at most: again while the fastest holds its claim down
AGREE = 0.02         # ... unless the last two agree this closely (a stall makes batches disagree)
MAX_GATE_MS = 80.0   # the gate waits at most this long for the candidate's calls to be enqueued
GATE_SLACK_MS = 1.0  # on top of the host time the gate hides (the messages, the pool's mapping)
DONE_WAIT_S = 2.0    # after the candidate's answer, how long its done flag may take to show (it precedes the answer)
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


def copies_into(base, regions):
    """(destination, source) byte views, one per input tensor: its region of `base` and the span of
    its storage that the region holds."""
    import torch

    pairs = []
    for t, region in regions:
        if region["span"] == 0:
            continue
        size = t.element_size()
        src = torch.as_strided(t, (region["span"],), (1,), t.storage_offset())
        pairs.append((base[region["offset"]:region["offset"] + region["span"] * size], src.reshape(-1).view(torch.uint8)))
    return pairs


def fill(base, regions):
    """Copy every input tensor into its region of `base`."""
    for dst, src in copies_into(base, regions):
        dst.copy_(src)


def stage(skeletons, regions, base):
    """Fill `base` (the judge's staging copy of a pool) and return (calls, regions) rebuilt as
    views of it: the judge's pristine inputs then take the pool's size once, not twice. Each input
    tensor is dropped once copied (the caller holds no other reference to the ones it drew)."""
    for i in range(len(regions)):
        fill(base, regions[i:i + 1])
        regions[i] = (None, regions[i][1])
    views = []

    def view(region):
        v = region_tensor(base, region)
        views.append((v, region))
        return v

    calls = [rebuild(s, view) for s in skeletons]
    return calls, views


class Room:
    """The judge's pool and its staging copy, made once per evaluation and grown when a batch needs
    more: the pool a cudaMalloc of its own (DeviceBuffer) exported once, so the candidate's process
    maps it once; the staging copy (a tensor of the judge's) holds the judge's pristine inputs,
    copied into the pool on the judge's clock stream once the candidate's calls are enqueued."""

    def __init__(self, device):
        self.device = device
        self.pool = None
        self.staging = None
        self.handle = None
        self.retired = []

    def ensure(self, nbytes, staging=True):
        """A pool of at least nbytes, and a staging copy of its size unless staging=False (a lean
        evaluation's batch copies from its draws). An outgrown pool is kept, not freed: the
        candidate's process may still map it, and memory freed under another process's mapping is
        undefined in CUDA (free() once that process is gone)."""
        import torch

        nbytes = max(int(nbytes), ALIGN)
        if self.pool is None or self.pool.nbytes < nbytes:
            if self.pool is not None:
                self.retired.append(self.pool)
            self.staging = None
            self.pool = DeviceBuffer(nbytes)
            self.handle = self.pool.export()
        if not staging:
            self.staging = None
        elif self.staging is None or self.staging.numel() < self.pool.nbytes:
            self.staging = None
            self.staging = torch.empty(self.pool.nbytes, dtype=torch.uint8, device=self.device)
        return self

    def held_bytes(self):
        """What a batch of this size or less would reuse: the pool and the staging copy."""
        if self.pool is None:
            return 0
        return self.pool.nbytes + (self.staging.numel() if self.staging is not None else 0)

    def free(self):
        """Every pool's memory back to the device: only once no other process maps them."""
        self.staging = None
        for buf in self.retired + ([self.pool] if self.pool is not None else []):
            buf.free()
        self.pool, self.handle, self.retired = None, None, []


class DonePage:
    """The batch's done word, in a page of host memory the judge and the candidate's process share
    (an anonymous MAP_SHARED mapping made before the fork), registered with CUDA in each process
    (register(), once its context exists). The candidate's stream raises it after its calls
    (raise_done), the judge's clock stream waits for it, and the judge can release that wait with a
    store from its host (write()): no stream of its own is involved, so none can hold the release
    up (CUDA shares a few hardware queues among a process's streams, and a stream blocked on a wait
    can hold up another stream that shares its queue)."""

    SIZE = 4096

    def __init__(self):
        import mmap

        self.map = mmap.mmap(-1, self.SIZE, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.host = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self.device_ptr = None

    def register(self):
        """Map the page into this process's CUDA context (cudaHostRegister, mapped); returns the
        device address of the done word."""
        if self.device_ptr is None:
            rt = _runtime()
            rc = rt.cudaHostRegister(ctypes.c_void_p(self.host), ctypes.c_size_t(self.SIZE), ctypes.c_uint(3))
            if rc != 0:  # 3: portable | mapped
                rt.cudaGetLastError()
                raise BatchError("cudaHostRegister of the done page failed: %s" % rt.cudaGetErrorString(rc).decode())
            dptr = ctypes.c_void_p()
            rc = rt.cudaHostGetDevicePointer(ctypes.byref(dptr), ctypes.c_void_p(self.host), ctypes.c_uint(0))
            if rc != 0:
                rt.cudaGetLastError()
                raise BatchError("cudaHostGetDevicePointer of the done page failed: %s" %
                                 rt.cudaGetErrorString(rc).decode())
            self.device_ptr = dptr.value
        return self.device_ptr

    def write(self, value):
        ctypes.c_uint32.from_address(self.host).value = value


class FlagWords:
    """The judge's flags of a batch: the gate, a word of a small cudaMalloc of its own (exported once
    per evaluation; a wait on a word of the pool itself cost the other process tens of milliseconds
    per batch), which batch k sets to k once its inputs are in; and the done word of the DonePage,
    which the candidate's stream sets to k after its calls."""

    def __init__(self, done_page):
        import torch

        self.buffer = DeviceBuffer(ALIGN)
        self.buffer.view.zero_()
        self.gate = self.buffer.view[:4].view(torch.int32)
        self.handle = self.buffer.export()
        self.done = done_page
        self.done_ptr = done_page.register()
        self.count = 0

    def next(self):
        """The GpuClock of the next batch, and what its command carries."""
        self.count += 1
        return GpuClock(self, self.count), {"handle": self.handle, "value": self.count}


class GpuClock:
    """The judge's clock of one batch on a GPU (the module's docstring). Everything runs on a
    non-blocking stream of the judge's (a stream waiting for the done flag must not hold up the
    judge's other work; the legacy default stream would). open() lets the inputs in; close(reads)
    waits for the done flag, reads the samples (reads.launch(): kernel launches only) and records
    the end; finish() waits for that end, and raises BatchError when the done flag never came; the
    caller then ends the candidate's processes and release()s the clock, so no stream of the
    judge's is left waiting. A clock that was closed must be finished or released: a device-wide
    synchronize while its stream waits would never return."""

    def __init__(self, flags, value):
        import torch

        self.flags, self.value = flags, value
        self.stream = torch.cuda.Stream()
        self.start, self.copying, self.ready, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        self.opened = self.closed = self.finished = False
        self.copied_bytes = 0
        with torch.cuda.stream(self.stream):
            self.start.record()

    def open(self, copies):
        """The inputs copied into the pool (copies: (pool's bytes, the judge's bytes) pairs), `ready`
        recorded, then the gate flag set: no call of the candidate can start before `ready`. (Work
        of the candidate's other streams that watches the pool fill during the copy shows as a copy
        slower than the judge's own: copy_excess_ms.)"""
        import torch

        with torch.cuda.stream(self.stream):
            self.copying.record()
            for dst, src in copies:
                copy_in(dst, src)
            self.ready.record()
            self.flags.gate.fill_(self.value)
        self.copied_bytes = sum(src.numel() for _dst, src in copies)
        self.opened = True

    def close(self, reads):
        import torch

        with torch.cuda.stream(self.stream):
            wait_for_value(self.stream, self.flags.done_ptr, self.value)
            reads.launch()
            self.end.record()
        self.closed = True

    def finish(self, limit_s=DONE_WAIT_S):
        """Wait for `end` (up to limit_s after the candidate's answer): the batch's outputs are read
        by then. Raises BatchError when the done flag never came; the caller then ends the
        candidate's process and release()s the clock."""
        import time

        deadline = time.perf_counter() + limit_s
        while not self.end.query():
            if time.perf_counter() > deadline:
                raise BatchError("its process answered, but its stream never raised the batch's done flag (the "
                                 "write that follows its calls): the judge's clock could not end")
            time.sleep(0.0002)
        self.finished = True

    def release(self, limit_s=10.0):
        """End a clock that was closed but not finished: the done word written from the judge's host
        (again, while the clock's stream has not moved on: work of the candidate's still on the GPU
        may write it too; its process should be gone first), up to limit_s. Raises BatchError if the
        stream is still waiting then."""
        import time

        if not self.closed or self.finished:
            return
        deadline = time.perf_counter() + limit_s
        while not self.end.query():
            if time.perf_counter() > deadline:
                raise BatchError("the judge's clock stream still waits for the done flag it raised itself")
            self.flags.done.write(self.value)
            time.sleep(0.001)
        self.finished = True

    def gate_ms(self):
        """The GPU time from the batch's command to its inputs' arrival (for the report)."""
        self.ready.synchronize()
        return self.start.elapsed_time(self.ready)

    def ms(self):
        """elapsed(ready, end): the batch, from its inputs' arrival to the judge's read of its outputs."""
        return self.ready.elapsed_time(self.end)

    def copy_ms(self):
        return self.copying.elapsed_time(self.ready)


def copy_in(dst, src):
    """dst <- src (uint8 device tensors of one size) with a kernel on the judge's SMs, never the
    copy engine: a copy engine could run beside a kernel of the candidate's that watches the pool
    fill, and so hide that kernel's work from CopyRate's excess; a kernel of the judge's context
    takes turns with the candidate's, so whatever the candidate runs meanwhile lengthens it."""
    import torch

    if dst.numel() % 8 == 0 and dst.data_ptr() % 8 == 0 and src.data_ptr() % 8 == 0:
        dst, src = dst.view(torch.int64), src.view(torch.int64)
    torch.bitwise_or(src, 0, out=dst)


class CopyRate:
    """How fast the judge copies device memory, measured before any candidate code exists (so no
    other work shares the GPU): what a batch's copy-in should take (expected_ms). A copy-in that
    took longer shared the GPU with other work, which only the candidate's process can have had
    running then (a kernel of another stream watching the pool fill and computing on what arrived
    before `ready`); GpuClock's time counts that excess as the candidate's (copy_excess_ms)."""

    SIZE = 64 << 20
    TOLERANCE = 1.1       # of the expected time, before the excess counts
    FLOOR_MS = 0.02       # plus this much (a small copy's launch and latency)

    def __init__(self, device):
        import torch

        a = torch.empty(self.SIZE, dtype=torch.uint8, device=device)
        b = torch.empty_like(a)
        a.fill_(1)
        copy_in(b, a)  # warm
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        events[0].record()
        for i in range(3):
            copy_in(b, a)
            events[i + 1].record()
        events[3].synchronize()
        fastest = min(events[i].elapsed_time(events[i + 1]) for i in range(3))
        self.bytes_per_ms = self.SIZE / max(fastest, 1e-4)

    def expected_ms(self, nbytes):
        return nbytes / self.bytes_per_ms

    def excess_ms(self, nbytes, copy_ms):
        return max(0.0, copy_ms - self.TOLERANCE * self.expected_ms(nbytes) - self.FLOOR_MS)


def gate_ms(said, scale):
    """How long the gate waits at most for "queued": the host time the candidate's process said its
    last batch took to map the pool and enqueue its calls (scaled to this batch's size), with room
    to spare, at most MAX_GATE_MS (a first batch, with nothing said yet, waits MAX_GATE_MS:
    one_batch's default). The deadline matters only when
    "queued" does not come (a launch queue so full that the host waits for the GPU): any figure is
    safe, as a short one leaves host work before the clock's read of the outputs and a long one
    only delays the batch."""
    said = said if isinstance(said, dict) else {}
    host = [said.get("map_ms"), said.get("loop_ms")]
    if not all(isinstance(x, (int, float)) and 0 <= x < 1e6 for x in host):
        return GATE_SLACK_MS
    return min(MAX_GATE_MS, 1.25 * (host[0] + host[1] * scale) + GATE_SLACK_MS)


def _stream_value_op(name):
    from anvil import cuda_ipc

    _rt, drv = cuda_ipc._load()
    if drv is None:
        raise BatchError("the CUDA driver is not loaded in this process")
    return getattr(drv, name + "_v2", None) or getattr(drv, name)


def wait_for_value(stream, address, value):
    """`stream`'s next work waits until the 32-bit word at the device address is at least value
    (cuStreamWaitValue32, CU_STREAM_WAIT_VALUE_GEQ: the stream's front end waits, no kernel spins)."""
    rc = _stream_value_op("cuStreamWaitValue32")(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(address),
                                                 ctypes.c_uint32(value), ctypes.c_uint(0))
    if rc != 0:
        raise BatchError("cuStreamWaitValue32 failed (CUDA error %d)" % rc)


def wait_for_gate(address, value):
    """The candidate's side of the gate: this process's current stream waits for the gate word."""
    import torch

    wait_for_value(torch.cuda.current_stream(), address, value)


def raise_done(address, value):
    """The candidate's side of the done flag: after the calls enqueued so far on the current stream,
    the 32-bit word at the device address (its DonePage's) becomes value (cuStreamWriteValue32, with
    its default memory fence: the calls' writes are visible first)."""
    import torch

    rc = _stream_value_op("cuStreamWriteValue32")(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                                                  ctypes.c_uint64(address), ctypes.c_uint32(value), ctypes.c_uint(0))
    if rc != 0:
        raise BatchError("cuStreamWriteValue32 on the batch's done flag failed (CUDA error %d)" % rc)


# ---------------------------------------------------------------------------------------------
# Sizing

def calls_for(per_call_ms, call_bytes, device, reference_ms=None, target_ms=TARGET_MS, held_bytes=0):
    """How many calls make a batch of target_ms, within MIN_CALLS..MAX_CALLS, the memory a batch
    may take (call_bytes: what one call holds: its inputs twice, the pool and the judge's pristine
    copy, and its outputs; held_bytes: what the judge's Room already holds, which the batch reuses)
    and, given the reference's time per call, a candidate at most MAX_SPEEDUP times faster (a
    claim of less buys a shorter batch, never a longer one)."""
    if reference_ms and reference_ms > 0:
        per_call_ms = max(per_call_ms or 0, reference_ms / MAX_SPEEDUP)
    n = MAX_CALLS if not per_call_ms or per_call_ms <= 0 else int(math.ceil(target_ms / per_call_ms))
    n = max(MIN_CALLS, min(MAX_CALLS, n))
    room = (free_memory(device) + held_bytes) * MEMORY_SHARE
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


def secret_seed():
    return random.SystemRandom().randrange(1 << 31)


# ---------------------------------------------------------------------------------------------
# Reading the candidate's outputs back

_ITEMSIZE = {}


def itemsize(dtype_name):
    """Bytes per element of a torch dtype named like "float32" (BatchError if it is none)."""
    size = _ITEMSIZE.get(dtype_name)
    if size is None:
        import torch

        dtype = getattr(torch, str(dtype_name), None)
        if not isinstance(dtype, torch.dtype):
            raise BatchError("unknown dtype %r" % (dtype_name,))
        size = _ITEMSIZE[dtype_name] = torch.empty(0, dtype=dtype).element_size()
    return size


class Remote:
    """A CUDA tensor of the other process, not copied: where it lies (its allocation's IPC handle,
    the byte offset of its first element) and what it is (dtype, shape, strides in elements)."""

    __slots__ = ("handle", "offset", "dtype", "shape", "stride", "count", "reach", "dense")

    def __init__(self, handle, offset, dtype, shape, stride=None):
        self.handle = handle
        self.offset = offset
        self.dtype = dtype
        self.shape = [int(n) for n in shape]
        if any(n < 0 for n in self.shape) or (stride is not None and len(stride) != len(self.shape)):
            raise ValueError("a shape of negative size or strides of another rank")
        dense = _contiguous(self.shape)
        self.stride = [int(x) for x in stride] if stride is not None else dense
        self.count = math.prod(self.shape)
        self.reach = 0 if self.count == 0 else 1 + sum((n - 1) * st for n, st in zip(self.shape, self.stride))
        self.dense = self.stride == dense or self.count <= 1

    def numel(self):
        return self.count

    def span(self):
        """Elements from the first to one past the last it reaches (0 when empty)."""
        return self.reach

    def contiguous(self):
        return self.dense


def _contiguous(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(int(n), 1)
    return list(reversed(out))


class Exporter:
    """The candidate's side of a batch's answer on a GPU: every output tensor described by where
    it lies, its allocation's CUDA IPC handle made once per allocation (known by the driver's
    buffer id, which a freed and reallocated block does not keep). Cheap enough to run between
    launches, so it hides behind the GPU's work."""

    BUFFER_ID = 7  # CU_POINTER_ATTRIBUTE_BUFFER_ID

    def __init__(self):
        from anvil import cuda_ipc

        self.rt, self.drv = cuda_ipc._load()
        self.segments = []   # handle hex, by index
        self.known = {}      # buffer id -> (base, index)

    def segment(self, ptr):
        from anvil import cuda_ipc

        buffer_id = ctypes.c_ulonglong(0)
        if self.drv.cuPointerGetAttribute(ctypes.byref(buffer_id), self.BUFFER_ID, ctypes.c_uint64(ptr)) != 0:
            raise BatchError("an output's memory is not a CUDA allocation")
        if buffer_id.value in self.known:
            return self.known[buffer_id.value]
        found = cuda_ipc._range(self.drv, ptr)
        if found is None:
            raise BatchError("an output's memory is not a CUDA allocation")
        handle = cuda_ipc._Handle()
        if self.rt.cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(found[0])) != 0:
            self.rt.cudaGetLastError()
            raise BatchError("an output's memory cannot be shared (CUDA IPC)")
        self.segments.append(bytes(handle.reserved).hex())
        self.known[buffer_id.value] = (found[0], len(self.segments) - 1)
        return self.known[buffer_id.value]

    def note(self, value, dense):
        """Record one call's output: in `dense` (segments and offsets, while every output is one
        contiguous tensor of the same dtype and shape: no per-call structure to parse), else as a
        described value. Returns the described value when not dense, else None."""
        import torch

        if dense is not None and type(value) is torch.Tensor and value.is_cuda and value.numel() and (
                value.is_contiguous()):
            key = (str(value.dtype)[6:], list(value.shape))
            if dense.setdefault("kind", key) == key:
                base, index = self.segment(value.data_ptr())
                dense["segs"].append(index)
                dense["offs"].append(value.data_ptr() - base)
                return None
        return self.describe(value)

    def describe(self, value, depth=0):
        import torch

        if type(value) is torch.Tensor and value.is_cuda:
            if value.numel() == 0:
                return {"t": [-1, 0, str(value.dtype)[6:], list(value.shape), list(value.stride())]}
            base, index = self.segment(value.data_ptr())
            return {"t": [index, value.data_ptr() - base, str(value.dtype)[6:], list(value.shape), list(value.stride())]}
        if isinstance(value, torch.Tensor):
            return {"__object__": type(value).__module__ + "." + type(value).__name__}
        if value is None or type(value) in (bool, int, str):
            return value
        if type(value) is float:
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if depth < 16 and type(value) in (list, tuple):
            items = [self.describe(v, depth + 1) for v in value]
            return items if type(value) is list else {"__tuple__": items}
        if depth < 16 and type(value) is dict and all(type(k) is str for k in value):
            return {"__dict__": {k: self.describe(v, depth + 1) for k, v in value.items()}}
        return {"__object__": type(value).__module__ + "." + type(value).__name__}


def remote_outputs(skeleton, segments, depth=0):
    """The judge's side of Exporter: the skeleton with every tensor a Remote (an empty one a local
    empty tensor); raises BatchError for what does not parse."""
    import torch

    if depth == 0 and type(skeleton) is dict and len(skeleton) == 1 and "t" in skeleton:  # the usual: one tensor
        t = skeleton["t"]
        if (type(t) is list and len(t) == 5 and type(t[0]) is int and t[0] >= 0 and type(t[1]) is int and t[1] >= 0
                and t[2] in _ITEMSIZE and t[0] < len(segments)):
            stride = t[4]
            if type(stride) is list and all(type(x) is int and x >= 0 for x in stride):
                try:
                    return Remote(segments[t[0]], t[1], t[2], t[3], stride)
                except (TypeError, ValueError):
                    pass  # the general path names what is wrong
    if isinstance(skeleton, list):
        return [remote_outputs(v, segments, depth + 1) for v in skeleton]
    if isinstance(skeleton, dict) and depth < 32:
        if "t" in skeleton:
            try:
                seg, offset, dtype, shape, stride = skeleton["t"]
                if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
                    raise ValueError("dtype %r" % dtype)
                if seg == -1:
                    return torch.empty([int(n) for n in shape], dtype=getattr(torch, dtype))
                if any(int(x) < 0 for x in stride) or int(offset) < 0:
                    raise ValueError("negative offset or stride")
                return Remote(segments[int(seg)], int(offset), str(dtype), shape, stride)
            except (ValueError, TypeError, IndexError) as e:
                raise BatchError("an output description does not parse: %s" % e)
        if "__tuple__" in skeleton:
            return tuple(remote_outputs(v, segments, depth + 1) for v in skeleton["__tuple__"])
        if "__dict__" in skeleton:
            return {k: remote_outputs(v, segments, depth + 1) for k, v in skeleton["__dict__"].items()}
        if "__float__" in skeleton:
            return float(skeleton["__float__"])
        if "__object__" in skeleton:
            from anvil.opaque import Opaque

            return Opaque(str(skeleton["__object__"]))
    return skeleton


class DenseOutputs:
    """A batch's outputs answered densely (every call one contiguous tensor of one dtype and shape:
    per call only an allocation index and a byte offset), as a sequence of Remote on demand."""

    def __init__(self, dense, segments, n):
        try:
            dtype, shape = dense["kind"]
            self.segs, self.offs = list(dense["segs"]), list(dense["offs"])
            self.dtype, self.shape = str(dtype), [int(x) for x in shape]
            itemsize(self.dtype)
            if len(self.segs) != n or len(self.offs) != n or any(x < 0 for x in self.shape):
                raise ValueError("%d calls, %d allocations, %d offsets" % (n, len(self.segs), len(self.offs)))
            if any(type(i) is not int or not 0 <= i < len(segments) for i in self.segs):
                raise ValueError("an allocation index out of range")
            if any(type(o) is not int or o < 0 for o in self.offs):
                raise ValueError("a negative offset")
        except (KeyError, TypeError, ValueError) as e:
            raise BatchError("a dense answer does not parse: %s" % e)
        self.segments = segments
        self.count = math.prod(self.shape)

    def __len__(self):
        return len(self.segs)

    def __getitem__(self, k):
        return Remote(self.segments[self.segs[k]], self.offs[k], self.dtype, self.shape)


def reads_dense(outputs, plan, mapped):
    """Reads of DenseOutputs' samples: the first addresses of all calls at once."""
    import torch

    reads = Reads()
    if len(plan) != 1 or plan[0][1] is None or plan[0][0] != outputs.count:
        return reads  # not the reference's one output of this size: the checks name it
    size_of = itemsize(outputs.dtype)
    need = outputs.count * size_of
    bases = [mapped.base(handle) for handle in outputs.segments]
    firsts = []
    for seg, off in zip(outputs.segs, outputs.offs):
        ptr, size = bases[seg]
        if off % size_of or off + need > size:
            raise BatchError("an output lies outside the memory its process exported")
        firsts.append(ptr + off)
    positions = plan[0][1]
    starts = torch.tensor(firsts, dtype=torch.int64).to(positions.device)
    reads.add(size_of, [(tuple(range(len(firsts))), 0, getattr(torch, outputs.dtype),
                         starts[:, None] + positions * size_of)])
    return reads


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

            try:
                raw = bytes.fromhex(handle)
            except (TypeError, ValueError):
                raise BatchError("a CUDA IPC handle that is not hexadecimal text")
            if len(raw) != 64:
                raise BatchError("a CUDA IPC handle of %d bytes" % len(raw))
            self.rt = self.rt or _runtime()
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
        nbytes = remote.span() * itemsize
        if remote.offset < 0 or remote.offset % itemsize or remote.offset + nbytes > size:
            raise BatchError("an output lies outside the memory its process exported")
        flat = device_view(ptr + remote.offset, nbytes).view(dtype)
        return flat.as_strided(remote.shape, remote.stride)

    def close(self):
        if self.rt is not None:
            for ptr, _size in self.maps.values():
                self.rt.cudaIpcCloseMemHandle(ctypes.c_void_p(ptr))
        self.maps.clear()


def require_gather():
    """Load the gather kernel into this process's CUDA context (once); BatchError if it cannot be."""
    if _Gather.get() is None:
        raise BatchError("the judge's gather kernel (share/batch/gather.ptx) could not be loaded")


class _Gather:
    """share/batch/gather.ptx loaded into this process's CUDA context: one launch reads bytes at
    arbitrary device addresses (the other process's allocations, mapped here), so reading every
    output of a batch costs one kernel, not one per allocation."""

    _loaded = None

    @classmethod
    def get(cls):
        if cls._loaded is None:
            cls._loaded = cls._load() or False
        return cls._loaded or None

    @staticmethod
    def _load():
        path = share.path("batch", "gather.ptx")
        try:
            with open(path, "rb") as f:
                ptx = f.read() + b"\0"
            drv = ctypes.CDLL("libcuda.so.1")
            module, fn = ctypes.c_void_p(), ctypes.c_void_p()
            if drv.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx)) != 0:
                return None
            if drv.cuModuleGetFunction(ctypes.byref(fn), module, b"anvil_gather") != 0:
                return None
            return drv, fn
        except OSError:
            return None

    @classmethod
    def read(cls, addresses, size, out=None):
        """uint8 tensor (len(addresses) * size) of the bytes at the (int64, CUDA) addresses, into
        `out` where given (then only a kernel is launched, on the current stream)."""
        import torch

        drv, fn = cls.get()
        n = addresses.numel()
        if out is None:
            out = torch.empty(n * size, dtype=torch.uint8, device=addresses.device)
        if n == 0:
            return out
        args = [ctypes.c_uint64(addresses.data_ptr()), ctypes.c_uint64(out.data_ptr()), ctypes.c_longlong(n),
                ctypes.c_int(size)]
        params = (ctypes.c_void_p * 4)(*[ctypes.addressof(a) for a in args])
        threads = 256
        blocks = (n * size + threads - 1) // threads
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        rc = drv.cuLaunchKernel(fn, ctypes.c_uint(blocks), 1, 1, ctypes.c_uint(threads), 1, 1, 0, stream, params, None)
        if rc != 0:
            raise BatchError("the judge's gather kernel did not launch (CUDA error %d)" % rc)
        return out


def reads_of(outputs, plan, mapped):
    """Reads of every tensor leaf of every call's output (outputs[k]: [(name, leaf)]) where it lies:
    a Remote in the other process's memory (one gather launch per element size over every
    allocation), a local tensor (the CPU's batch) directly. plan[j] = (numel, positions): leaf j's
    expected element count and its (calls, SAMPLES) positions; a leaf of another size is skipped
    here (its shape is wrong, which the full comparison reports)."""
    import torch

    reads = Reads()
    remote = {}  # (leaf, dtype name) -> [(call, first byte's address)] for contiguous Remotes
    strided = {}  # itemsize -> [(call, leaf, dtype, addresses)]
    for k, out in enumerate(outputs):
        for j, (_name, leaf) in enumerate(out):
            if j >= len(plan) or plan[j][1] is None or not hasattr(leaf, "numel") or leaf.numel() != plan[j][0]:
                continue
            if not isinstance(leaf, Remote):
                reads.local[(k, j)] = leaf.reshape(-1)[plan[j][1][k]]
                continue
            size_of = itemsize(leaf.dtype)
            ptr, size = mapped.base(leaf.handle)
            if leaf.offset < 0 or leaf.offset % size_of or leaf.offset + leaf.reach * size_of > size:
                raise BatchError("an output lies outside the memory its process exported")
            if leaf.dense:
                remote.setdefault((j, leaf.dtype), []).append((k, ptr + leaf.offset))
            else:
                elements = _strided(plan[j][1][k], leaf.shape, leaf.stride)
                strided.setdefault(size_of, []).append((k, j, getattr(torch, leaf.dtype),
                                                        elements * size_of + (ptr + leaf.offset)))
    for (j, dtype_name), rows in remote.items():
        calls = [k for k, _a in rows]
        positions = plan[j][1]  # on the device: only the calls' first addresses cross over
        starts = torch.tensor([a for _k, a in rows], dtype=torch.int64).to(positions.device)
        if len(calls) != positions.shape[0] or calls != list(range(len(calls))):
            positions = positions[torch.tensor(calls, device=positions.device)]
        reads.add(itemsize(dtype_name), [(tuple(calls), j, getattr(torch, dtype_name),
                                          starts[:, None] + positions * itemsize(dtype_name))])
    for size_of, rows in strided.items():
        reads.add(size_of, [((k,), j, dtype, addresses[None, :]) for k, j, dtype, addresses in rows])
    return reads


class Reads:
    """A batch's sample reads, made ready before the judge's clock (addresses on the device, the
    result's memory allocated: nothing that waits for the device or allocates is left), launched
    inside it (launch(): one gather kernel per element size) and split after it (samples())."""

    def __init__(self):
        self.groups = []  # (itemsize, addresses (flat, int64, device), out (uint8), rows)
        self.local = {}   # (call, leaf) -> values already here (the CPU's batch)

    def add(self, size_of, rows):
        for group in self.groups:
            if group[0] == size_of:
                group[3].extend(rows)
                break
        else:
            self.groups.append([size_of, None, None, list(rows)])

    def ready(self):
        """Join each element size's addresses and allocate the results (before the clock)."""
        import torch

        if self.groups:
            require_gather()
        for group in self.groups:
            size_of, rows = group[0], group[3]
            addresses = torch.cat([a.reshape(-1) for _c, _j, _d, a in rows]) if len(rows) > 1 else rows[0][3].reshape(-1)
            group[1] = addresses
            group[2] = torch.empty(addresses.numel() * size_of, dtype=torch.uint8, device=addresses.device)
        return self

    def launch(self):
        for size_of, addresses, out, _rows in self.groups:
            _Gather.read(addresses, size_of, out)

    def samples(self):
        found = dict(self.local)
        for size_of, addresses, out, rows in self.groups:
            at = 0
            for calls, j, dtype, a in rows:
                values = out[at * size_of:(at + a.numel()) * size_of].view(dtype).view(len(calls), a.shape[1])
                found[("rows", j, tuple(calls))] = values
                at += a.numel()
        return Samples(found)


class Samples(dict):
    """sample()'s result: samples[(call, leaf)] -> that leaf's sampled values; whole groups of calls
    are kept as one tensor and split on demand (splitting per call would cost the clock)."""

    def get(self, key, default=None):
        if key in self:
            return dict.__getitem__(self, key)
        if not hasattr(self, "_rows"):
            self._rows = {}
            for group, values in list(self.items()):
                if group[0] == "rows":
                    for i, k in enumerate(group[2]):
                        self._rows[(k, group[1])] = (values, i)
        hit = self._rows.get(key)
        return default if hit is None else hit[0][hit[1]]


def _strided(flat, shape, stride):
    """Element offsets of flat (row-major) positions in a tensor of these strides."""
    out = flat.new_zeros(flat.shape)
    rest = flat.clone()
    for n, st in zip(reversed(shape), reversed(stride)):
        out += (rest % max(n, 1)) * st
        rest //= max(n, 1)
    return out


def compare_samples(got, expected, tolerance):
    """How many sampled elements are wrong (got and expected: 1-D, the same positions), with the
    first bad one: (count, (index, got, expected)) or (0, None). Non-finite expected values are
    the task's business and skipped; a non-finite got never passes; integers compare exactly."""
    import torch

    from anvil import output_compare

    exp = expected.to(got.device)
    if got.dtype != exp.dtype or got.shape != exp.shape:
        return got.numel(), (0, "dtype %s" % output_compare.dtype_name(got.dtype), "dtype %s" % output_compare.dtype_name(exp.dtype))
    if not got.is_floating_point():
        bad = got != exp
    else:
        atol, rtol, _norm = output_compare.tolerance_for(tolerance, exp.dtype) or (0.0, 0.0, None)
        g, e = got.double(), exp.double()
        bad = ~torch.isfinite(g) | ((g - e).abs() > atol + rtol * e.abs())
        bad &= torch.isfinite(e)
    count = int(bad.sum())
    if not count:
        return 0, None
    i = int(bad.nonzero()[0, 0])
    return count, (i, got[i].item(), exp[i].item())
