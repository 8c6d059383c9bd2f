import time

import pytest
import torch

from anvil import policy, timing

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_percentile_interpolates_linearly():
    samples = [1.0, 2.0, 3.0, 4.0]
    assert timing.percentile(samples, 0) == 1.0
    assert timing.percentile(samples, 25) == pytest.approx(1.75)
    assert timing.percentile(samples, 50) == pytest.approx(2.5)
    assert timing.percentile(samples, 75) == pytest.approx(3.25)
    assert timing.percentile(samples, 100) == 4.0
    assert timing.percentile([7.0], 50) == 7.0
    assert timing.percentile([], 50) is None


def test_summarize_keeps_call_order():
    stats = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert stats == {"median_ms": 3.0, "min_ms": 1.0, "max_ms": 5.0, "p25_ms": 2.0, "p75_ms": 4.0,
                     "samples": [5.0, 1.0, 3.0, 2.0, 4.0]}


def test_rotation_over_input_sets_on_cpu():
    seen = []

    def fn(tag, x):
        seen.append(tag)
        return x

    sets = [("a", torch.ones(1)), ("b", torch.ones(1)), ("c", torch.ones(1))]
    result = timing.measure(fn, sets, "cpu", warmup=2, calls=5, flush_l2=True, kernel_sum=True)
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]  # 2 warm-up + 5 timed, never the same twice in a row
    assert len(result["samples"]) == 5
    assert result["kernel_sum_ms"] is None  # no profiler sum on the CPU
    assert result["min_ms"] <= result["p25_ms"] <= result["median_ms"] <= result["p75_ms"] <= result["max_ms"]


def test_cpu_times_a_known_duration():
    def sleeper(x):
        time.sleep(0.005)
        return x

    result = timing.measure(sleeper, [(1,)], "cpu", warmup=1, calls=5)
    assert 5.0 <= result["min_ms"]
    assert result["median_ms"] < 100.0


def test_exceptions_propagate():
    def broken(x):
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        timing.measure(broken, [(1,)], "cpu", warmup=0, calls=3)


class _Event:
    """One kineto event as _read_trace reads it."""

    def __init__(self, name, cuda, start, dur, tid=1, corr=0, stream=7, annotation=False):
        self._v = (name, cuda, start, dur, tid, corr, stream, annotation)

    def name(self):
        return self._v[0]

    def device_type(self):
        from torch.autograd import DeviceType

        return DeviceType.CUDA if self._v[1] else DeviceType.CPU

    def start_ns(self):
        return self._v[2]

    def duration_ns(self):
        return self._v[3]

    def start_thread_id(self):
        return self._v[4]

    def correlation_id(self):
        return self._v[5]

    def device_resource_id(self):
        return self._v[6]

    def is_user_annotation(self):
        return self._v[7]


def test_the_trace_tells_markers_from_a_calls_own_gpu_sleeps():
    """The harness's flush and marker are launched outside a call's range and left out; a GPU sleep
    launched inside a call is the call's work, another thread's kernel is counted as such, and the
    sum per call is the call's activity alone."""
    from types import SimpleNamespace

    events = []
    for call, base in enumerate((0, 10_000)):
        events += [
            _Event("cudaLaunchKernel", False, base + 10, 1, corr=100 + call),     # the flush
            _Event("zero_kernel", True, base + 20, 500, corr=100 + call),
            _Event("cudaLaunchKernel", False, base + 30, 1, corr=200 + call),     # the marker
            _Event("spin_kernel", True, base + 600, 1_000, corr=200 + call),
            _Event("anvil::call", False, base + 40, 5_000, annotation=True),
            _Event("aten::mul", False, base + 50, 100),
            _Event("cudaLaunchKernel", False, base + 60, 1, corr=300 + call),     # the call's own sleep
            _Event("spin_kernel", True, base + 1_700, 2_000_000 // 1_000, corr=300 + call),
            _Event("cudaLaunchKernel", False, base + 70, 1, corr=400 + call),     # the call's kernel
            _Event("mul_kernel", True, base + 3_800, 1_000, corr=400 + call),
            _Event("cudaLaunchKernel", False, base + 5_100, 1, corr=600 + call),  # the closing marker
            _Event("spin_kernel", True, base + 4_900, 1_000, corr=600 + call),
        ]
    events += [_Event("cudaLaunchKernel", False, 20_000, 1, tid=2, corr=500),      # another thread's
               _Event("side_kernel", True, 20_100, 4_000, corr=500),
               _Event("cuhide::op", False, 10_080, 5)]                           # a "cu" op is an op
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))
    trace = {}
    timing._read_trace(prof, trace, calls=2)
    names = sorted(k["name"] for k in trace["kernels"])
    assert names == ["mul_kernel", "mul_kernel", "side_kernel", "spin_kernel", "spin_kernel"]
    assert trace["markers"] == 2 and trace["marker_stream"] == 7
    assert trace["other_thread_kernels"] == 1
    assert [op for op in trace["cpu_ops"] if not op.startswith("cudaLaunch")] == ["aten::mul", "aten::mul", "cuhide::op"]
    assert trace["ranges"] == 2
    assert trace["kernel_sum_ms"] == pytest.approx((2 * (2_000 + 1_000) + 4_000) / 1e6 / 2)


def test_work_of_another_stream_is_joined_when_it_ends_before_its_calls_closing_marker():
    """Each call is closed by a marker on its stream: a kernel of another stream that ended before it
    began was waited for (torch's own ops join their streams: cuDNN's grouped convolutions, its LSTM);
    one still running then escaped the call. Under kernelbench joined work is no side stream; under
    cuda-agent (one stream) any is."""
    from types import SimpleNamespace

    events = []
    for call, (base, side_end) in enumerate(((0, 4_800), (10_000, 6_500))):
        events += [
            _Event("cudaLaunchKernel", False, base + 30, 1, corr=200 + call),     # the opening marker
            _Event("spin_kernel", True, base + 600, 100, corr=200 + call),
            _Event("anvil::call", False, base + 40, 5_000, annotation=True),
            _Event("cudaLaunchKernel", False, base + 70, 1, corr=400 + call),     # on the call's stream
            _Event("mul_kernel", True, base + 800, 1_000, corr=400 + call),
            _Event("cudaLaunchKernel", False, base + 80, 1, corr=500 + call),     # on another stream
            _Event("dgrad_engine", True, base + 900, side_end - 900, corr=500 + call, stream=9),
            _Event("cudaLaunchKernel", False, base + 5_100, 1, corr=600 + call),  # the closing marker
            _Event("spin_kernel", True, base + 5_200, 100, corr=600 + call),
        ]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))
    trace = {}
    timing._read_trace(prof, trace, calls=2)
    assert trace["markers"] == 2 and trace["marker_stream"] == 7
    side = [k for k in trace["kernels"] if k["stream"] == 9]
    assert [k["joined"] for k in side] == [True, False]
    assert "joined" not in [k for k in trace["kernels"] if k["stream"] == 7][0]
    own = {"mul_kernel", "dgrad_engine"}
    kernelbench = policy.analyze_trace(trace["kernels"], [], own, dict(policy.DEFAULT_POLICY, own_work=False),
                                       trace["marker_stream"], 2)
    assert kernelbench["side_stream_kernels"] == {"dgrad_engine": 1}  # the second call's alone
    cuda_agent = policy.analyze_trace(trace["kernels"], [], own, policy.DEFAULT_POLICY, trace["marker_stream"], 2)
    assert cuda_agent["side_stream_kernels"] == {"dgrad_engine": 2}
    # A closing marker missing: nothing of another stream can be said joined
    trace = {}
    timing._read_trace(SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(
        events=lambda: events[:-1]))), trace, calls=2)
    assert trace["markers"] == 1 and not any(k.get("joined") for k in trace["kernels"])


def test_a_range_opened_inside_a_call_hides_nothing_of_it():
    """A call that opens and closes its own "anvil::call" range first: what it launches after that
    range is still inside the call (the ranges' union), and the extra range is counted."""
    from types import SimpleNamespace

    events = [
        _Event("anvil::call", False, 100, 10_000, annotation=True),
        _Event("anvil::call", False, 110, 5, annotation=True),                 # the candidate's own
        _Event("aten::addmm", False, 200, 50),
        _Event("cudaLaunchKernel", False, 300, 1, corr=1),
        _Event("gemm_kernel", True, 1_000, 3_000, corr=1),
    ]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))
    trace = {}
    timing._read_trace(prof, trace, calls=1)
    assert [k["name"] for k in trace["kernels"]] == ["gemm_kernel"]
    assert "aten::addmm" in trace["cpu_ops"]
    assert trace["ranges"] == 2


def test_the_inspection_follows_the_timed_calls_one_range_each():
    """The timed calls run without the profiler; inspected_calls(calls) more follow under it, each
    one "anvil::call" range (a trace with more is one the calls tampered with: findings)."""
    phases = []
    trace = {}
    timing.measure(lambda x: x * 2 + 1, [(torch.ones(1000),)], "cpu", warmup=1, calls=12,
                   observe=lambda phase, k, out, ms: phases.append(phase), trace=trace)
    assert phases == ["warmup"] + ["timed"] * 12 + ["inspected"] * timing.inspected_calls(12)
    assert timing.inspected_calls(12) == 10 and timing.inspected_calls(3) == 3
    assert trace["ranges"] == trace["calls"] == 10
    assert trace["cpu_ops"].count("aten::mul") == 10


def test_needs_an_input_set():
    with pytest.raises(ValueError):
        timing.measure(lambda: None, [], "cpu", warmup=0, calls=1)


@needs_cuda
def test_flush_buffer_is_twice_l2():
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert timing.flush_bytes(torch.device("cuda", 0)) == max(2 * l2, timing.MIN_FLUSH_BYTES)


@needs_cuda
def test_cuda_events_and_kernel_sum_see_a_known_kernel():
    # torch.cuda._sleep spins for a number of cycles; calibrate cycles -> ms with events first.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles = int(10_000_000 * 2.0 / start.elapsed_time(end))  # about 2 ms

    def fn(x):
        torch.cuda._sleep(cycles)
        return x

    sets = [(torch.ones(4, device="cuda"),), (torch.ones(4, device="cuda"),)]
    result = timing.measure(fn, sets, "cuda", warmup=2, calls=10, flush_l2=True, kernel_sum=True)
    assert 1.5 < result["median_ms"] < 3.0
    assert "kernel_sum_error" not in result
    assert 1.5 < result["kernel_sum_ms"] < 3.0
    no_sum = timing.measure(fn, sets, "cuda", warmup=0, calls=3, flush_l2=False, kernel_sum=False)
    assert no_sum["kernel_sum_ms"] is None and len(no_sum["samples"]) == 3


@needs_cuda
def test_a_host_slower_than_the_sleep_is_caught_and_the_sleep_grows():
    # A tiny kernel behind a host side that turns slow (1 ms of Python) after the probes: the first
    # timed call outruns the calibrated sleep (its sample holds host time), is counted late, and the
    # sleep grows so the remaining calls time the kernel alone again.
    import time

    n = [0]
    x = torch.ones(1024, device="cuda")

    def fn(x):
        n[0] += 1
        if n[0] > 2 + 3:  # warm-up and the three probes are fast
            t = time.perf_counter()
            while time.perf_counter() - t < 1e-3:
                pass
        return x * 2

    result = timing.measure(fn, [(x,)], "cuda", warmup=2, calls=12, flush_l2=False, kernel_sum=False)
    assert result["late_calls"] >= 1, result
    assert result["gpu_sleep_ms"] > 1.0, result
    assert result["samples"][0] > 0.5, result  # the late call: the GPU waited on the host
    assert result["median_ms"] < 0.1, result  # the kernel itself takes microseconds


def _in_thread(fn):
    """(the thread running fn, a list that gets fn's result once it returns)."""
    import threading

    got = []
    t = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    t.start()
    return t, got


def _try_flock(path, kind):
    """Whether a flock of `kind` on `path` could be had now (let go at once)."""
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_gpu_lock_shared_beside_shared_never_beside_exclusive(tmp_path):
    """Vettings and warm-ups (shared) run beside each other; a measurement (exclusive) waits for
    all of them, and they for it (flock: each GpuLock is an open file of its own)."""
    import fcntl
    import os
    import threading

    path = str(tmp_path / "gpu0.lock")

    def try_lock(kind):
        return _try_flock(path, kind)

    first = timing.GpuLock(path, shared=True)
    assert first.fd >= 1000  # released after the driver's descriptors when its process ends
    assert try_lock(fcntl.LOCK_SH)  # another shared holder is let in
    got = []
    taker = threading.Thread(target=lambda: got.append(timing.GpuLock(path, shared=True)), daemon=True)
    taker.start()
    taker.join(timeout=10)
    assert got, "a second shared lock waited"
    second = got[0]
    assert not try_lock(fcntl.LOCK_EX)
    os.close(first.fd)
    assert not try_lock(fcntl.LOCK_EX)  # one shared holder is enough to keep a measurement out
    os.close(second.fd)
    assert try_lock(fcntl.LOCK_EX)
    alone = timing.GpuLock(path)  # exclusive by default: the measurement's
    assert not try_lock(fcntl.LOCK_SH)
    os.close(alone.fd)
    assert try_lock(fcntl.LOCK_SH)


def test_gpu_lock_prepared_together_parks_then_times_alone(tmp_path):
    """Measurements prepared together (anvil baselines' default on a GPU): a wave passes the gate
    and holds the lock shared; a parked one is listed with its contexts until it holds the lock
    alone; a later one waits at the gate until every parked one has ended; a dead one's entry does
    not count."""
    import fcntl
    import os
    import threading

    path = str(tmp_path / "gpu0.lock")

    a = timing.GpuLock(path, together=True)
    b = timing.GpuLock(path, together=True)  # the same wave: both prepare at once (shared)
    assert not _try_flock(path, fcntl.LOCK_EX) and _try_flock(path, fcntl.LOCK_SH)
    assert timing.parked_contexts(path) == 0
    ta, parked_a = _in_thread(lambda: a.park(contexts=2))  # waits: b still prepares
    ta.join(timeout=0.5)
    assert not parked_a and timing.parked_contexts(path) == 2
    tc, third = _in_thread(lambda: timing.GpuLock(path, together=True))  # a later wave: at the gate
    tc.join(timeout=0.5)
    assert not third
    tb, parked_b = _in_thread(lambda: b.park(contexts=2))  # b parks: one of the two holds the GPU alone
    for _ in range(100):
        if parked_a or parked_b:
            break
        threading.Event().wait(0.05)
    assert len(parked_a) + len(parked_b) == 1
    assert timing.parked_contexts(path) == 2  # the other waits, listed; the one timing is not
    assert not _try_flock(path, fcntl.LOCK_SH)  # nothing prepares while one times
    first, second = (a, b) if parked_a else (b, a)
    os.close(first.fd)  # the first ends: the second times
    for _ in range(100):
        if len(parked_a) + len(parked_b) == 2:
            break
        threading.Event().wait(0.05)
    assert len(parked_a) + len(parked_b) == 2 and timing.parked_contexts(path) == 0
    tc.join(timeout=0.5)
    assert not third  # the gate stays shut while a parked one has not ended
    os.close(first.gate)
    os.close(second.fd)
    os.close(second.gate)
    tc.join(timeout=5)
    assert third, "the next wave passed the gate once the last one ended"
    os.close(third[0].fd)
    os.close(third[0].gate)
    # A parked entry whose lock nobody holds (its process died) counts for nothing and goes.
    folder = path + ".parked"
    with open(os.path.join(folder, "deadbeef"), "w") as f:
        f.write("2")
    assert timing.parked_contexts(path) == 0 and not os.listdir(folder)


def test_the_large_measurements_of_a_wave_keep_within_its_room(tmp_path, monkeypatch):
    """A lean measurement prepared in a wave reserves its need (reserve_wave_memory): granted while
    the live reservations and it fit the capacity, refused beyond it; a reservation is freed when
    its holder closes it (its process ends) or died without listing it as held. GpuLock with room
    waits for room before it passes the gate, holding neither gate nor lock meanwhile and inside
    its one announced wait, and holds the reservation once it has the lock."""
    import fcntl
    import os

    path = str(tmp_path / "gpu0.lock")
    first = timing.reserve_wave_memory(path, 60, 100)
    assert first is not None
    assert timing.reserve_wave_memory(path, 50, 100) is None  # 60 + 50 > 100
    second = timing.reserve_wave_memory(path, 40, 100)  # 60 + 40 fits
    assert second is not None and timing.reserve_wave_memory(path, 1, 100) is None
    os.close(first)  # its process ended: its room is free
    assert timing._live_entries(path + ".reserved") == 40
    with open(os.path.join(path + ".reserved", "deadbeef"), "w") as f:  # a dead one's, never locked
        f.write("50")
    assert timing._live_entries(path + ".reserved") == 40
    assert sorted(os.listdir(path + ".reserved")) != [] and "deadbeef" not in os.listdir(path + ".reserved")

    from anvil import _cli

    r, w = os.pipe()  # the zygote's done pipe: the waits announced (env/launch.h counts one for the taking)
    os.set_blocking(r, False)
    monkeypatch.setattr(_cli, "_done_fds", [w])
    waiter, got = _in_thread(lambda: timing.GpuLock(path, together=True, room=(70, 100)))
    waiter.join(timeout=0.5)
    assert not got, "took the lock with no room: 40 + 70 > 100"
    assert _try_flock(path + ".gate", fcntl.LOCK_EX), "waits for room holding the gate: the wave cannot move"
    assert _try_flock(path, fcntl.LOCK_EX), "waits for room holding the lock"
    os.close(second)
    waiter.join(timeout=5)
    assert got, "room was freed but the measurement still waits"
    lock = got[0]
    assert os.read(r, 64) == b"wh", "the wait for room is not inside the one announced wait"
    os.close(r)
    os.close(w)
    assert lock.reservation is not None and timing._live_entries(path + ".reserved") == 70
    assert timing.reserve_wave_memory(path, 31, 100) is None
    os.close(lock.reservation)
    os.close(lock.fd)
    os.close(lock.gate)
    assert timing._live_entries(path + ".reserved") == 0


def test_every_taker_waits_at_the_gate_while_one_is_parked(tmp_path):
    """While a measurement prepared together is parked, no new work starts on the GPU, exclusive
    (a measurement alone, a vetting alone) or shared (a vetting, a warm-up): none beside its memory,
    none to keep it waiting. And a taker that passed the gate and waits for the lock does not
    deadlock a wave-mate that parks meanwhile: it parks without the gate."""
    import threading

    path = str(tmp_path / "gpu0.lock")

    p = timing.GpuLock(path, together=True)
    q = timing.GpuLock(path, together=True)
    tp, parked = _in_thread(lambda: p.park(contexts=2))
    tp.join(timeout=0.5)
    assert not parked and timing.parked_contexts(path) == 2  # waits for q, still preparing
    tx, alone = _in_thread(lambda: timing.GpuLock(path))
    tv, shared = _in_thread(lambda: timing.GpuLock(path, shared=True))
    tx.join(timeout=0.5)
    tv.join(timeout=0.1)
    assert not alone and not shared
    import os

    os.close(q.fd)  # q ends without parking: p times
    os.close(q.gate)
    tp.join(timeout=5)
    assert parked and p.gated
    tx.join(timeout=0.5)
    tv.join(timeout=0.1)
    assert not alone and not shared  # p is timing: nothing else yet
    os.close(p.fd)
    os.close(p.gate)
    tx.join(timeout=5)
    tv.join(timeout=5)
    assert len(alone) + len(shared) >= 1
    done = list(alone + shared)  # the first through (the other waits for it: one exclusive)
    for lock in done:
        os.close(lock.fd)
    tx.join(timeout=5)
    tv.join(timeout=5)
    assert alone and shared
    for lock in alone + shared:
        if lock not in done:
            os.close(lock.fd)

    # A taker holding the gate while it waits for the lock; a wave-mate parks without the gate, and
    # times first.
    a = timing.GpuLock(path, together=True)
    tx, alone = _in_thread(lambda: timing.GpuLock(path))
    tx.join(timeout=0.5)
    assert not alone  # past the gate, waiting for a's shared hold
    ta, parked = _in_thread(lambda: a.park(contexts=2, gate_wait_s=0.3))
    for _ in range(100):
        if parked or alone:
            break
        threading.Event().wait(0.05)
    assert parked and not alone and not a.gated
    os.close(a.fd)
    tx.join(timeout=5)
    assert alone
    os.close(alone[0].fd)
    os.close(a.gate)


def _parked_entry(path):
    """A measurement listed as parked on the lock at `path`, its process alive (the entry locked)
    while the returned descriptor is open."""
    import fcntl
    import os

    folder = path + ".parked"
    os.makedirs(folder, exist_ok=True)
    entry = os.open(os.path.join(folder, "cafe"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(entry, fcntl.LOCK_EX)
    os.write(entry, b"2")
    return entry


def test_no_taker_takes_the_lock_while_a_measurement_is_parked(tmp_path):
    """flock(2) wakes its waiters in no order: a taker that passed the gate (a measurement alone,
    a second try alone, a vetting, a warm-up) takes the lock only once no measurement is listed
    as parked, so that none that parked without the gate loses the GPU to it. Here the lock is
    free and one measurement is listed (as in the moment a parked one gives up its shared hold)."""
    import os

    path = str(tmp_path / "gpu0.lock")
    entry = _parked_entry(path)  # its process lives, parked
    for kind in ({}, {"shared": True}):
        tx, got = _in_thread(lambda: timing.GpuLock(path, **kind))
        tx.join(timeout=0.5)
        assert not got, "took the lock beside a parked measurement (%s)" % (kind or "exclusive")
        if not kind:
            os.close(entry)  # the parked one is gone: its entry no longer counts
            tx.join(timeout=5)
            assert got
            os.close(got[0].fd)
            entry = _parked_entry(path)
    os.close(entry)
    tx.join(timeout=5)
    assert got
    os.close(got[0].fd)


def test_parked_contexts_are_taken_off_only_what_can_be_theirs():
    """NVML's list of the GPU's processes, as the driver numbers them: the host's pids (every
    other context listed, the parked ones' among them), or this namespace's (the others' listed as
    0, or not at all)."""
    from anvil import evidence

    # The host's numbers: this judge is 1 in its namespace, 4242 on the host.
    assert evidence.others_beside([4242, 4250, 5001, 5002], 1, {7}, parked=2) == (1, "the host's numbers")
    assert evidence.others_beside([4242, 5001, 5002], 1, {7}, parked=2) == (0, "the host's numbers")
    assert evidence.others_beside([4242, 5001, 5002], 1, {7}, parked=0) == (2, "the host's numbers")
    # This namespace's numbers, the others omitted: parked ones take nothing off its candidate.
    assert evidence.others_beside([1, 7], 1, {7}, parked=4) == (1, "this namespace's numbers")
    assert evidence.others_beside([1], 1, {7}, parked=4) == (0, "this namespace's numbers")
    # ... or listed as 0: a foreign one beyond the parked ones still counts.
    assert evidence.others_beside([1, 0, 0, 0], 1, {7}, parked=2) == (1, "this namespace's numbers")
    assert evidence.others_beside([1, 7, 0, 0], 1, {7}, parked=2) == (1, "this namespace's numbers")


def test_gpu_lock_waits_are_announced_on_the_done_pipe_of_this_process_only(tmp_path, monkeypatch):
    """Each wait for the GPU's lock (its taking, a parked one's wait to time alone) is told on the
    zygote's done pipe, "w" before and "h" after, so that anvil's timeout leaves it out
    (env/launch.h, LockWaits); a child forked since (the candidate's process) tells nothing there."""
    import os

    from anvil import _cli

    r, w = os.pipe()
    os.set_blocking(r, False)
    monkeypatch.setattr(_cli, "_done_fds", _cli._done_fds)  # restored after (cleared at each fork)
    _cli._done_fds[:] = [w]

    def told():
        try:
            return os.read(r, 64)
        except BlockingIOError:
            return b""

    path = str(tmp_path / "gpu0.lock")
    lock = timing.GpuLock(path, together=True)
    assert told() == b"wh"
    lock.park(contexts=1)
    assert told() == b"wh"
    os.close(lock.fd)
    os.close(lock.gate)
    pid = os.fork()
    if pid == 0:  # the candidate's process: the number is not its pipe
        _cli.gpu_lock_wait(True)
        os._exit(0)
    os.waitpid(pid, 0)
    assert told() == b""
    _cli._done_fds.clear()
    os.close(r)
    os.close(w)


def test_gpu_hold_takes_the_lock_as_a_measurement_alone_and_gives_it_back(tmp_path):
    """ncu_profile's hold (python -m anvil.gpu_hold): not while a measurement is parked ("busy" in
    its time), then held (no one else takes the lock) until its stdin closes."""
    import fcntl
    import os
    import subprocess
    import sys

    path = str(tmp_path / "gpu0.lock")
    entry = _parked_entry(path)  # a parked measurement, alive
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(timing.__file__)))
    argv = [sys.executable, "-m", "anvil.gpu_hold", path]
    t0 = time.monotonic()
    busy = subprocess.run(argv + ["1"], env=env, capture_output=True, text=True, timeout=30)
    assert (busy.returncode, busy.stdout) == (3, "busy\n"), busy
    assert time.monotonic() - t0 < 10
    os.close(entry)  # the parked one timed and ended
    hold = subprocess.Popen(argv + ["10"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert hold.stdout.readline() == "held\n"
    assert not _try_flock(path, fcntl.LOCK_SH), "another took the lock while it was held"
    hold.stdin.close()
    assert hold.wait(timeout=10) == 0
    assert _try_flock(path, fcntl.LOCK_EX)
