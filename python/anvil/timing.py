"""How the evaluation runner times one model (docs/runner-protocol.md, step 7).

measure(fn, input_sets, device, warmup, calls, flush_l2, kernel_sum) calls fn(*input_sets[k])
with k rotating over the pre-built input sets (consecutive calls see different buffers):
`warmup` untimed calls, then `calls` timed ones. On a CUDA device each timed call is

    flush L2 (zero a buffer of twice the L2 size) -> GPU sleep (hide_launch) -> start event
    -> fn(*args) -> end event -> torch.cuda.synchronize()

on the current stream, and the sample is the events' elapsed time. The GPU sleep
(torch.cuda._sleep) lasts longer than the host needs to enqueue one call (measured during
warm-up, 1.5x plus 20 us, at most 20 ms), so the call's kernels are queued before the start event
is reached and the sample is the GPU's time for the call, not the host's launch latency (the
problem nvbench's blocking kernel solves); host time beyond the sleep still shows. Without it, a
model whose Python wrapper is slow to launch (torch.compile's, a cuDNN call) looks slower than its
kernels by the launch latency, which varies from process to process; on the CPU it is the
time.perf_counter() difference around the call, without a flush. The result holds median_ms,
min_ms, max_ms, p25_ms, p75_ms (linear interpolation between order statistics), the samples in
call order, and kernel_sum_ms: with kernel_sum on a CUDA device, `calls` further calls without
flushes under torch.profiler (CUDA activity only), the summed device time of every GPU activity
(kernels, memcpy, memset) divided by `calls` (CUDA-Agent's number); None otherwise. When the
profiler itself fails, kernel_sum_ms is None and kernel_sum_error says why; an exception of fn
propagates to the caller.

The caller runs this under torch.no_grad() with its flags pinned; nothing here checks outputs.
"""
import time
import warnings

MIN_FLUSH_BYTES = 8 << 20


def percentile(sorted_samples, q):
    """The q-th percentile (0..100) of ascending samples, interpolating linearly between order
    statistics (numpy's default); None for no samples."""
    if not sorted_samples:
        return None
    pos = (len(sorted_samples) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def summarize(samples):
    """The protocol's statistics of samples in ms (kept in call order under "samples"), rounded to
    the nanosecond."""
    ordered = sorted(samples)

    def ns(x):
        return None if x is None else round(x, 6)

    return {
        "median_ms": ns(percentile(ordered, 50)),
        "min_ms": ns(ordered[0] if ordered else None),
        "max_ms": ns(ordered[-1] if ordered else None),
        "p25_ms": ns(percentile(ordered, 25)),
        "p75_ms": ns(percentile(ordered, 75)),
        "samples": [ns(s) for s in samples],
    }


def flush_bytes(device):
    """Bytes of the L2 flush buffer: twice the device's L2, at least MIN_FLUSH_BYTES."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return max(2 * int(l2), MIN_FLUSH_BYTES)


class _Rotation:
    """Hands out the input sets in turn, continuing across warm-up, timed and profiled calls."""

    def __init__(self, input_sets):
        if not input_sets:
            raise ValueError("timing needs at least one input set")
        self.sets = input_sets
        self.count = 0

    def next(self):
        args = self.sets[self.count % len(self.sets)]
        self.count += 1
        return args


def measure(fn, input_sets, device, warmup=5, calls=30, flush_l2=True, kernel_sum=True, hide_launch=True):
    """Time fn over the rotated input sets; see the module docstring for the method and result."""
    import torch

    device = torch.device(device)
    cuda = device.type == "cuda"
    rotation = _Rotation(input_sets)
    for _ in range(warmup):
        out = fn(*rotation.next())
        del out
    if cuda:
        torch.cuda.synchronize()

    hide = {}
    if cuda and hide_launch:
        hide = _launch_hiding(fn, rotation)
    samples = (_cuda_samples(fn, rotation, device, calls, flush_l2, hide.get("sleep_cycles", 0)) if cuda
               else _cpu_samples(fn, rotation, calls))
    result = summarize(samples)
    if hide:
        result["host_enqueue_ms"] = round(hide["host_enqueue_ms"], 6)
        result["gpu_sleep_ms"] = round(hide["sleep_ms"], 6)
    result["kernel_sum_ms"] = None
    if cuda and kernel_sum and calls > 0:
        try:
            result["kernel_sum_ms"] = kernel_sum_ms(fn, rotation, calls)
        except Exception as e:  # noqa: BLE001 - only a profiler failure lands here
            if isinstance(e, _CallError):
                raise e.error
            result["kernel_sum_error"] = "%s: %s" % (type(e).__name__, str(e).strip()[:300])
    return result


def _cpu_samples(fn, rotation, calls):
    samples = []
    for _ in range(calls):
        args = rotation.next()
        start = time.perf_counter()
        out = fn(*args)
        end = time.perf_counter()
        del out
        samples.append((end - start) * 1e3)
    return samples


def _sleep_cycles_per_ms():
    """GPU clock cycles per ms of torch.cuda._sleep, measured with events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 2_000_000
    torch.cuda._sleep(cycles // 10)  # warm the kernel
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def _launch_hiding(fn, rotation):
    """How long the GPU must sleep before each timed call to hide the host's launch latency."""
    import torch

    enqueue = []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*rotation.next())
        enqueue.append((time.perf_counter() - t0) * 1e3)
        del out
    torch.cuda.synchronize()
    host_ms = max(enqueue)
    sleep_ms = min(1.5 * host_ms + 0.02, 20.0)
    return {"host_enqueue_ms": host_ms, "sleep_ms": sleep_ms, "sleep_cycles": int(sleep_ms * _sleep_cycles_per_ms())}


def _cuda_samples(fn, rotation, device, calls, flush_l2, sleep_cycles=0):
    import torch

    flush = torch.empty(flush_bytes(device), dtype=torch.uint8, device=device) if flush_l2 else None
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(calls):
        args = rotation.next()
        if flush is not None:
            flush.zero_()
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        start.record()
        out = fn(*args)
        end.record()
        torch.cuda.synchronize()
        del out
        samples.append(start.elapsed_time(end))
    del flush
    return samples


class _CallError(Exception):
    """An exception of fn inside the profiler block, told apart from the profiler's own."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def kernel_sum_ms(fn, rotation, calls):
    """Mean GPU busy time per call in ms: the device time of all GPU activity recorded by
    torch.profiler over `calls` calls, divided by `calls`."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            try:
                for _ in range(calls):
                    out = fn(*rotation.next())
                    del out
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - re-raised outside as the call's own error
                raise _CallError(e)
    total_us = sum(event.time_range.elapsed_us() for event in prof.events()
                   if event.device_type == DeviceType.CUDA)
    return total_us / 1e3 / calls
