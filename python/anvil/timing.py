"""How the evaluation runner times one model (docs/runner-protocol.md, step 7).

measure(fn, input_sets, device, warmup, calls, flush_l2, kernel_sum) calls fn(*input_sets[k])
with k rotating over the pre-built input sets (consecutive calls see different buffers):
`warmup` untimed calls, then `calls` timed ones. On a CUDA device each timed call is

    flush L2 (zero a buffer of twice the L2 size) -> GPU sleep (hide_launch) -> start event
    -> fn(*args) -> end event -> torch.cuda.synchronize()

on the current stream, and the sample is the events' elapsed time. The GPU sleep
(torch.cuda._sleep) lasts longer than the host needs to enqueue one call up to its end event
(measured during warm-up, 2x plus 50 us, at most MAX_SLEEP_MS), so the call's kernels and its end
event are queued before the start event is reached and the sample is the GPU's time for the call,
not the host's launch latency (the problem nvbench's blocking kernel solves). Each timed call
checks that: when the host took more than SLEEP_MARGIN of the sleep from launching it to
recording the end event (the profiler's and the annotation's overhead, a busy CPU), the GPU may
have waited on the host inside the sample, so the call is counted in late_calls and the sleep
for the following calls becomes twice that host time plus 50 us. Host time beyond the sleep still
shows (a model that computes on the CPU is not timed as free). Without it, a
model whose Python wrapper is slow to launch (torch.compile's, a cuDNN call) looks slower than its
kernels by the launch latency, which varies from process to process; on the CPU it is the
time.perf_counter() difference around the call, without a flush. The result holds median_ms,
min_ms, max_ms, p25_ms, p75_ms (linear interpolation between order statistics), the samples in
call order, and kernel_sum_ms: with kernel_sum (or a trace) on a CUDA device,
inspected_calls(calls) further calls as the timed ones are made (the L2 flush, then a one-cycle
GPU sleep as a marker) under torch.profiler, the summed device time of the GPU activity (kernels,
memcpy, memset) launched inside the calls divided by their number (CUDA-Agent's number); None
otherwise. When the profiler itself fails, kernel_sum_ms is None and kernel_sum_error says why; an
exception of fn propagates to the caller. The timed calls never run under the profiler: its cost
per launch would be in their samples.

The caller runs this under torch.no_grad() with its flags pinned; nothing here checks outputs.
"""
import bisect
import contextlib
import time
import warnings

MIN_FLUSH_BYTES = 8 << 20
MAX_SLEEP_MS = 20.0
INSPECTED_CALLS = 10  # calls profiled after the timed ones (inspected_calls)
SLEEP_MARGIN = 0.8  # the host must be done within this share of the sleep
# A kernel of another stream that ends this little after its call's closing marker began is still
# joined (GPU timestamps of two streams; a dependency makes the marker start after it ends)
JOIN_SLACK_NS = 1_000


class Clock(dict):
    """Seconds spent per named phase, summed over repeats: `with clock("peaks"): ...`; and, with
    mark(name), when an event happened ("@name": seconds since Clock.origin, the evaluation's
    start, which forked processes share)."""

    origin = None

    def mark(self, name):
        if Clock.origin is not None and "@" + name not in self:
            self["@" + name] = round(time.perf_counter() - Clock.origin, 4)

    @contextlib.contextmanager
    def __call__(self, name):
        start = time.perf_counter()
        try:
            yield
        finally:
            self[name] = round(self.get(name, 0.0) + time.perf_counter() - start, 4)


class GpuLock:
    """One GPU's lock among anvil's processes (a flock on `path`, taken before the process starts
    CUDA and held until it exits: the kernel lets it go then, however the process ends).

    Exclusive: a measurement that times (the judge of `anvil baselines`), the GPU to itself; the
    other measurements meanwhile do only host work (their task's import, its model's construction,
    their inputs' draws), so what is timed is alone on the GPU, and their CPU work is what the run
    queue's evidence sees. Shared: GPU work that times nothing (vetting, torch.compile's warm-up),
    any number at once, none of them while a measurement holds the GPU, and no measurement while one
    of them runs. A vetting again "alone" holds it exclusive: alone among anvil's vettings, warm-ups
    and measurements of baselines, and evaluations run side by side (`anvil bench --overlap`; a
    lone evaluation takes no lock).

    Every taker passes the gate first (path + ".gate", exclusive for a moment, until it holds the
    lock): measurements prepared together (park) hold the gate shared from their parking to their
    end, so nothing new starts on the GPU, shared or exclusive, until every parked one has timed
    (no other work beside their memory, and none that keeps them waiting). A taker of no wave
    takes the lock only once nothing is parked (_after_parked): a wave-mate that parked without the
    gate does not lose the GPU to it. waited_s: how long taking it took."""

    def __init__(self, path, shared=False, together=False, room=None):
        """together: a measurement prepared beside others (the baselines' `prepare` "together"):
        it holds the lock shared while it prepares (CUDA, its model, its inputs, the first calls),
        beside the others that passed the gate before any of them parked, and park() takes it
        exclusive for what is timed. The measurements of one wave so prepare at once, then time one
        after another, each alone at work on the GPU. room: (need_bytes, capacity_bytes) for a
        large one (reserve_wave_memory): it waits until its need fits beside the other large ones'
        before it passes the gate (the reservation held in self.reservation until the process
        ends), within this wait for the lock."""
        import fcntl
        import os

        from anvil._cli import gpu_lock_wait

        started = time.perf_counter()
        self.path = path
        self.gate = _high(os.open(path + ".gate", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        self.reservation = None
        gpu_lock_wait(True)  # others' time: not this process's limit's (anvil.zygote)
        try:
            while room is not None and self.reservation is None:
                self.reservation = reserve_wave_memory(path, *room)
                if self.reservation is None:
                    time.sleep(0.05)
            fcntl.flock(self.gate, fcntl.LOCK_EX)  # no parked measurement holds it (shared) any more
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            kind = fcntl.LOCK_SH if shared or together else fcntl.LOCK_EX
            if together:
                fcntl.flock(fd, kind)
            else:  # after every parked one: a wave-mate that parked without the gate must not lose
                _after_parked(path, fd, kind)  # the lock to this taker, which holds the gate meanwhile
            fcntl.flock(self.gate, fcntl.LOCK_UN)  # the next taker may pass
        finally:
            gpu_lock_wait(False)
        if not together:
            os.close(self.gate)
            self.gate = None
        self.waited_s = round(time.perf_counter() - started, 3)
        # Held on a high descriptor: a process's descriptors close in ascending order when it exits,
        # so the lock goes after the driver's (opened later, lower numbers), with the GPU's memory.
        self.fd = _high(fd)

    def park(self, contexts, gate_wait_s=2.0):
        """A measurement prepared together (above) gives up its shared hold and waits for the GPU
        alone. While it waits, its `contexts` CUDA contexts (its own and its candidate's process's)
        stay on the GPU with nothing running in them: they are listed in the parked directory
        (parked_contexts), which the baselines' evidence of other processes on the GPU counts out.
        It holds the gate shared until its process ends, so that nothing later starts on the GPU
        before this one has timed. The gate is not waited for longer than gate_wait_s: a taker
        that holds it while it waits for the lock (which this process holds shared) would wait
        for this one in turn; without the gate it parks all the same. Returns the seconds it waited."""
        import fcntl
        import os

        from anvil._cli import gpu_lock_wait

        started = time.perf_counter()
        entry, listed = _entry(self.path + ".parked", contexts)
        gpu_lock_wait(True)  # the wave-mates' timing: not this process's limit's
        try:
            deadline = time.perf_counter() + gate_wait_s
            self.gated = False
            while not self.gated:
                try:
                    fcntl.flock(self.gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    self.gated = True
                except BlockingIOError:
                    if time.perf_counter() >= deadline:
                        break
                    time.sleep(0.01)
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # not atomic (flock(2)): the shared hold goes first
        finally:
            gpu_lock_wait(False)
        try:
            os.unlink(listed)
        except OSError:
            pass
        os.close(entry)
        return round(time.perf_counter() - started, 3)


def _after_parked(path, fd, kind):
    """flock(fd, kind) once no measurement is parked on the lock at `path` (parked_contexts): the
    taker holds the gate, so no new one parks gated, but a wave-mate that was preparing may park
    without it (GpuLock.park) and would race this taker for the lock. Polled: flock(2) has no
    order among its waiters."""
    import fcntl

    while True:
        if parked_contexts(path) == 0:
            try:
                fcntl.flock(fd, kind | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
        time.sleep(0.01)


def parked_contexts(path):
    """The CUDA contexts of measurements parked on GPU lock `path` (GpuLock.park) that are still
    alive (a parked one removes its own entry once it holds the GPU); an entry left by a process
    that died is removed."""
    return _live_entries(path + ".parked")


def _live_entries(folder):
    """The sum of the numbers written in `folder`'s entries whose lock is held (their process is
    alive and holds them); an entry nobody holds is a dead process's and is removed. Entries whose
    name starts with "." are being written."""
    import errno
    import fcntl
    import os

    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    total = 0
    for name in names:
        if name.startswith("."):
            continue
        full = os.path.join(folder, name)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):  # held: its process is alive
                    try:
                        total += max(0, int(os.read(fd, 24) or b"0"))
                    except ValueError:
                        pass
                continue
            try:
                os.unlink(full)  # nobody holds it: its process is gone
            except OSError:
                pass
        finally:
            os.close(fd)
    return total


def _entry(folder, number):
    """A new entry of `folder` (for _live_entries): created, locked, `number` written, then listed
    under its final name; its descriptor (a high one), held until the process ends or closes it."""
    import fcntl
    import os

    os.makedirs(folder, mode=0o700, exist_ok=True)
    name = os.urandom(8).hex()  # not the pid: each runner is PID 1 of a namespace of its own
    fd = _high(os.open(os.path.join(folder, "." + name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    fcntl.flock(fd, fcntl.LOCK_EX)  # held while listed: an entry whose lock is free is a dead one's
    os.write(fd, str(int(number)).encode())
    os.rename(os.path.join(folder, "." + name), os.path.join(folder, name))
    return fd, os.path.join(folder, name)


def reserve_wave_memory(path, need_bytes, capacity_bytes):
    """A share of the GPU's memory for a large measurement prepared in a wave (the judge's
    wave_room): granted when what the live reservations on GPU lock `path` hold and
    need_bytes together fit capacity_bytes, else None. Granted: the reservation's descriptor, held
    until the process ends (its memory is the GPU's until then; a dead process's reservation is
    freed with its lock). Decided under an exclusive lock of the ledger, so two measurements never
    both take the last room."""
    import fcntl
    import os

    guard = os.open(path + ".reserved.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if _live_entries(path + ".reserved") + need_bytes > capacity_bytes:
            return None
        fd, _name = _entry(path + ".reserved", need_bytes)
        return fd
    finally:
        os.close(guard)


def _high(fd):
    """fd moved to a descriptor of 1000 or more (see GpuLock), or as it is where the limit is low."""
    import fcntl
    import os

    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 1000)
    except OSError:
        return fd
    os.close(fd)
    return high


def compiled(torch, model, mode):
    """torch.compile(model) as anvil's compile baseline: dynamo's caches reset first (a model of an
    earlier compile is not reused), and inductor compiling its kernels in this process
    (compile_threads 1): a judge that starts a pool of compile workers pays their start on every
    evaluation for a few kernels, and leaves processes below it. The kernels are the same: the
    number of threads changes how they are built, not what. `mode` "default" or a mode's name."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    except ImportError:  # a torch without inductor: torch.compile says what it lacks
        pass
    return torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)


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
    """Hands out call k's arguments: input_sets[k % len] for a list of pre-built sets, or
    args_for(k) for a callable (fresh inputs for every call); k runs on across warm-up, probe,
    timed and profiled calls."""

    def __init__(self, input_sets):
        if callable(input_sets):
            self.args_for = input_sets
        else:
            if not input_sets:
                raise ValueError("timing needs at least one input set")
            sets = list(input_sets)
            self.args_for = lambda k: sets[k % len(sets)]
        self.count = 0

    def next(self):
        k = self.count
        self.count += 1
        return k, self.args_for(k)


def _noop(phase, k, out, sample_ms):
    pass


def inspected_calls(calls):
    """How many calls measure() profiles after the timed ones (the trace, the kernel sum): a few are
    enough for both, and the profiler's cost grows with every kernel it records (KernelBench's
    recurrent models launch about 10,000 a call: bench/results/kb-profiler-2026-11-27/)."""
    return min(calls, INSPECTED_CALLS)


def measure(fn, input_sets, device, warmup=5, calls=30, flush_l2=True, kernel_sum=True, hide_launch=True,
            observe=None, trace=None):
    """Time fn over the input sets; see the module docstring for the method and result.

    input_sets: a list of argument tuples (rotated) or a function k -> the arguments of call k.
    observe(phase, k, out, sample_ms): called after every call, outside any timed region and after
    the device is synchronized (phase "warmup", "probe", "timed" or "inspected"; sample_ms None but
    for timed). trace: a dict: inspected_calls(calls) calls after the timed ones run under
    torch.profiler and trace receives their GPU activity and CPU-side ops (profiled_samples; on the
    CPU, profiled_cpu_samples, ops only). On a CUDA device kernel_sum_ms comes from those calls,
    made for it alone when kernel_sum is on without a trace: one method for every model."""
    import torch

    device = torch.device(device)
    cuda = device.type == "cuda"
    rotation = _Rotation(input_sets)
    observe = observe or _noop
    for _ in range(warmup):
        k, args = rotation.next()
        out = fn(*args)
        if cuda:
            _synchronize()
        observe("warmup", k, out, None)
        del out

    hide = {}
    if cuda and hide_launch:
        hide = _launch_hiding(fn, rotation, observe)
    if cuda:
        samples = _cuda_samples(fn, rotation, device, calls, flush_l2, hide, observe)
    else:
        samples = _cpu_samples(fn, rotation, calls, observe)
    result = summarize(samples)
    if hide:
        result["host_enqueue_ms"] = round(hide["host_enqueue_ms"], 6)
        result["gpu_sleep_ms"] = round(hide["sleep_ms"], 6)
        result["late_calls"] = hide.get("late_calls", 0)
    result["kernel_sum_ms"] = None
    n = inspected_calls(calls)
    if cuda and (trace is not None or kernel_sum) and n > 0:
        seen = trace if trace is not None else {}
        inspected = profiled_samples(fn, rotation, device, n, flush_l2, observe, seen)
        seen["median_ms"] = percentile(sorted(inspected), 50)
        if seen.get("profiler_error"):
            result["kernel_sum_error"] = seen["profiler_error"]
        else:
            result["kernel_sum_ms"] = seen.get("kernel_sum_ms")
    elif trace is not None and n > 0:
        profiled_cpu_samples(fn, rotation, n, observe, trace)
    return result


_perf_counter = time.perf_counter


def _synchronize():
    import torch

    torch.cuda.synchronize()


def _cpu_samples(fn, rotation, calls, observe=_noop, scope=contextlib.nullcontext, phase="timed"):
    """Timed calls on the CPU; each runs inside scope() (profiled_cpu_samples' annotation)."""
    samples = []
    for _ in range(calls):
        k, args = rotation.next()
        start = _perf_counter()
        with scope():
            out = fn(*args)
        end = _perf_counter()
        sample = (end - start) * 1e3
        observe(phase, k, out, sample)
        del out
        samples.append(sample)
    return samples


def profiled_cpu_samples(fn, rotation, calls, observe, trace):
    """calls calls as _cpu_samples makes them (phase "inspected"), under torch.profiler (CPU
    activity), each wrapped in record_function("anvil::call"); trace gets what profiled_samples
    gives, without GPU activity."""
    from torch.profiler import ProfilerActivity, record_function

    return _under_profiler(trace, [ProfilerActivity.CPU], calls, lambda: _cpu_samples(
        fn, rotation, calls, observe, lambda: record_function("anvil::call"), phase="inspected"))


def _under_profiler(trace, activities, calls, run):
    """run() (the timed calls; returns their samples) under torch.profiler with `activities`;
    trace then gets _read_trace's summary, or "profiler_error" when the profiler itself failed, and
    "seconds" (a Clock of the profiler's phases)."""
    from torch.profiler import profile

    clock = trace.setdefault("seconds", Clock())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        prof = profile(activities=activities)
        with clock("profiler_start"):
            prof.__enter__()
        try:
            with clock("calls"):
                samples = run()
        finally:
            try:
                with clock("profiler_stop"):
                    prof.__exit__(None, None, None)
            except Exception as e:  # noqa: BLE001 - the profiler's failure, not the call's
                trace["profiler_error"] = "%s: %s" % (type(e).__name__, str(e).strip()[:300])
    if "profiler_error" not in trace:
        try:
            with clock("read_trace"):
                _read_trace(prof, trace, calls)
        except Exception as e:  # noqa: BLE001
            trace["profiler_error"] = "%s: %s" % (type(e).__name__, str(e).strip()[:300])
    return samples


def sleep_cycles_per_ms():
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


def _launch_hiding(fn, rotation, observe=_noop):
    """How long the GPU must sleep before each timed call to hide the host's launch latency."""
    import torch

    enqueue = []
    for _ in range(3):
        torch.cuda.synchronize()
        k, args = rotation.next()
        t0 = _perf_counter()
        out = fn(*args)
        enqueue.append((_perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        observe("probe", k, out, None)
        del out
    torch.cuda.synchronize()
    host_ms = max(enqueue)
    sleep_ms = min(2 * host_ms + 0.05, MAX_SLEEP_MS)
    return {"host_enqueue_ms": host_ms, "sleep_ms": sleep_ms, "cycles_per_ms": sleep_cycles_per_ms()}


def _cuda_samples(fn, rotation, device, calls, flush_l2, hide=None, observe=_noop, scope=contextlib.nullcontext,
                  marker=False, phase="timed"):
    """Timed calls on a CUDA device (the module docstring's method); each call runs inside
    scope() (profiled_samples' annotation). hide: _launch_hiding's result, updated in place
    (sleep_ms, late_calls) as calls find the sleep too short; None or empty: no sleep, or with
    marker a one-cycle sleep before each call (profiled_samples' marker)."""
    import torch

    flush = torch.empty(flush_bytes(device), dtype=torch.uint8, device=device) if flush_l2 else None
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    hide = hide if hide else None
    if hide is not None:
        hide.setdefault("late_calls", 0)
    samples = []
    for _ in range(calls):
        k, args = rotation.next()
        if flush is not None:
            flush.zero_()
        t0 = _perf_counter()
        if hide is not None:
            torch.cuda._sleep(max(1, int(hide["sleep_ms"] * hide["cycles_per_ms"])))
        elif marker:
            torch.cuda._sleep(1)
        start.record()
        with scope():
            out = fn(*args)
        if marker and hide is None:
            torch.cuda._sleep(1)  # the call's closing marker: it starts once all the call joined is done
        end.record()
        host_ms = (_perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        sample = start.elapsed_time(end)
        if hide is not None and host_ms > SLEEP_MARGIN * hide["sleep_ms"]:
            hide["late_calls"] += 1
            hide["sleep_ms"] = min(max(2 * host_ms + 0.05, hide["sleep_ms"]), MAX_SLEEP_MS)
        observe(phase, k, out, sample)
        del out
        samples.append(sample)
    del flush
    return samples


def profiled_samples(fn, rotation, device, calls, flush_l2, observe, trace):
    """calls calls as _cuda_samples makes them (phase "inspected"), under torch.profiler (CUDA and
    CPU activity): the inspection that follows the timed calls, which themselves run without the
    profiler (its cost per launch would be in their samples: 1.3-2.2 times eager's time for
    KernelBench's DenseNet201, 1.7-5.5 times torch.compile's, bench/results/kb-profiler-2026-11-27/).

    Each call is preceded on the current stream by the L2 flush (when on) and a one-cycle GPU sleep
    (the marker), followed there by another (its closing marker), and wrapped on the host in
    record_function("anvil::call"). trace gets "kernels": [{"name", "stream", "us"}, and on another
    stream than the markers' "joined": whether it ended before its call's closing marker began] for
    every GPU activity that is not the harness's (the flush right before a marker, the markers),
    "cpu_ops": [names of ops recorded on any thread inside a call's host range, or on another
    thread at any time], "marker_stream", "calls", "markers" (how many pairs of markers the trace
    holds: fewer than calls means the trace is incomplete), "ranges" (how many "anvil::call" ranges: calls, unless the calls made their own),
    "other_thread_kernels" (GPU activity launched from a thread other than the calls'),
    "kernel_sum_ms" (summed device time of the candidate's activity per call), and "profiler_error"
    when the profiler itself failed (samples are still returned); measure() adds "median_ms", the
    inspected calls' median event time."""
    import torch
    from torch.profiler import ProfilerActivity, record_function

    torch.cuda.synchronize()
    return _under_profiler(trace, [ProfilerActivity.CPU, ProfilerActivity.CUDA], calls, lambda: _cuda_samples(
        fn, rotation, device, calls, flush_l2, None, observe, lambda: record_function("anvil::call"), marker=True,
        phase="inspected"))


def _read_trace(prof, trace, calls):
    """GPU activity launched from inside a call (its launch, matched by correlation id, lies in an
    "anvil::call" host range) or from another thread; the harness's own (flush, marker, input
    making, output copies) is launched outside and left out; a marker is a GPU sleep the harness
    launched (a call's own torch.cuda._sleep is the call's work). One pass over the events, each
    read once: a trace holds every kernel of the calls (hundreds of thousands for a recurrent
    model)."""
    from torch.autograd import DeviceType

    cuda_type = DeviceType.CUDA
    gpu, ranges, cpu, launches = [], [], [], {}
    main_thread = None
    for e in prof.profiler.kineto_results.events():
        name = e.name()
        if e.device_type() == cuda_type:
            if name != "anvil::call":  # the annotation's GPU-side twin
                gpu.append((e.start_ns(), e.duration_ns(), name, e.device_resource_id(), e.correlation_id()))
            continue
        start = e.start_ns()
        if name == "anvil::call":
            ranges.append((start, start + e.duration_ns()))
            main_thread = e.start_thread_id()
            continue
        tid = e.start_thread_id()
        if e.is_user_annotation():
            continue
        if name.startswith(("cuda", "cu")):
            launches[e.correlation_id()] = (start, tid)
        cpu.append((start, start + e.duration_ns(), tid, name))
    gpu.sort()
    calls_seen = len(ranges)
    spans = []  # the ranges' union: a range opened inside another (nested) extends nothing
    for a, b in sorted(ranges):
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    starts = [a for a, _b in spans]

    def inside(t):
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t <= spans[i][1]

    markers = []
    kernels = []
    launched = []  # per kernel kept: the span its launch lies in (None: none, or another thread)
    matched = 0
    other_thread = 0
    for g in gpu:
        launch = launches.get(g[4])
        span = None
        if launch is not None:
            matched += 1
            t, tid = launch
            if not inside(t) and (tid == main_thread or main_thread is None):
                if "spin_kernel" in g[2]:
                    markers.append(g)
                continue  # the harness's
            if main_thread is not None and tid != main_thread:
                other_thread += 1
            elif inside(t):
                span = bisect.bisect_right(starts, t) - 1
        elif "spin_kernel" in g[2]:  # not correlated: a sleep is taken for the marker
            markers.append(g)
            continue
        kernels.append({"name": g[2], "stream": g[3], "us": g[1] / 1e3})
        launched.append((g, span))
    marker_stream = markers[0][3] if markers else None
    # Each call is opened and closed by a marker on its stream (_cuda_samples): in the GPU's order,
    # the opening ones are the even, the closing ones the odd. A kernel of another stream is joined
    # when it ended before its call's closing marker began: the call's stream waited for it (or it
    # was done by then), so nothing of it runs past the call (where the batch's clock would miss it).
    opening, closing = markers[0::2], markers[1::2]
    paired = len(closing) == len(spans) and len(opening) == len(spans)
    for k, (g, span) in zip(kernels, launched):
        if g[3] != marker_stream:
            k["joined"] = bool(paired and span is not None and g[0] + g[1] <= closing[span][0] + JOIN_SLACK_NS)
    ops = [name for t, _end, tid, name in _outermost(cpu)
           if (tid != main_thread and main_thread is not None) or inside(t)]
    trace.update(kernels=kernels, cpu_ops=ops, marker_stream=marker_stream, calls=calls, markers=len(markers) // 2,
                 ranges=calls_seen, correlated=matched, other_thread_kernels=other_thread,
                 kernel_sum_ms=sum(k["us"] for k in kernels) / 1e3 / max(calls, 1))


def _outermost(ops):
    """The ATen ops (start, end, thread, name) not nested in another ATen op of their thread: the
    ones the caller asked for, not the ones an op runs inside itself (addmm's resolve_conj)."""
    out = []
    open_until = {}  # thread -> end of the outermost ATen op still open there
    for op in sorted(ops):
        start, end, tid, name = op
        if not name.startswith("aten::"):
            out.append(op)
            continue
        if start < open_until.get(tid, -1):
            continue
        open_until[tid] = end
        out.append(op)
    return out
