import time

import pytest
import torch

from anvil import timing

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
