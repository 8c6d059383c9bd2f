"""anvil.warm: torch.compile's caches warmed for a task, nothing timed (anvil.warm/1).

`anvil baselines` measures the baselines of many tasks one after another on a quiet GPU; before
that, it warms inductor's caches (its FX graphs and Triton kernels, on disk) for all of them at
once, several processes sharing the GPU, so that the measured compile costs a cache hit
(docs/baselines.md). The request is a runner request of the baselines alone (candidate_kind
"none", anvil.runner/1); the reference is built as the judge builds it, compiled as the judge
compiles it (timing.compiled), with the precision flags pinned and under no_grad, and called once
on one set of inputs drawn on the device (the judge's inputs have the same shapes, dtypes and
layout). The request's gpu_lock, when it names one, is taken shared before CUDA starts
(timing.GpuLock): warm-ups run beside each other and beside vettings, never while a measurement
times. Report, on fd 3 (else the last line of stdout):

    {"protocol": "anvil.warm/1", "status": "done"|"error", "message": "", "memory_limited": false,
     "seconds": {...}, "peak_bytes": N}
peak_bytes (on a GPU): the most torch's allocator held, the set of inputs and both models' calls
(eager, then compiled) with it: `anvil baselines` passes it to the task's measurement
(warm_peak_bytes, its room in a wave: anvil.judge wave_room).

memory_limited: the GPU ran out of memory (beside other warm-ups, anvil tries it again alone).

A task that cannot be loaded, drawn or compiled is reported as an error: its baseline measurement
says so again, and with the judge's words.
"""
import sys
import time

from anvil._cli import answer_one, exit_after, one_line, quiet_stdout

PROTOCOL = "anvil.warm/1"


def warm(request_text):
    """The report for one request (never raises, but for KeyboardInterrupt)."""
    started = time.perf_counter()
    report = {"protocol": PROTOCOL, "status": "error", "message": "", "memory_limited": False, "seconds": {}}
    try:
        from anvil import runner, timing
        from anvil.harness import Harness, Outcome, RequestError

        request = runner.parse_request(request_text)
        if request.get("gpu_lock") is not None:  # shared: nothing is timed, no measurement times meanwhile
            lock = timing.GpuLock(request["gpu_lock"], shared=True)  # held to the process's end
            report["seconds"]["lock_wait"] = lock.waited_s
        with quiet_stdout():
            h = Harness(request)
            h.setup()
            h.load_task()
            h.build_reference()
            report["seconds"]["setup"] = round(time.perf_counter() - started, 3)
            args = h.fresh_inputs(request["seed"] + 1, 1)[0]
            mark = time.perf_counter()
            compiled = timing.compiled(h.torch, h.ref, request["timing"]["compile_mode"])
            h.pin_flags()
            with h.torch.no_grad():
                h.ref(*args)  # eager too: the peak below is both models' (a lean task's room in a wave)
                compiled(*args)
            h.sync()
            report["seconds"]["compile"] = round(time.perf_counter() - mark, 3)
            if h.device.type == "cuda":
                report["peak_bytes"] = int(h.torch.cuda.max_memory_allocated(h.device))
        report["status"] = "done"
    except (Outcome, RequestError) as e:
        report["message"] = one_line(str(e), 300)
        report["memory_limited"] = getattr(e, "reason", None) == "gpu_memory" or _out_of_memory(e)
    except Exception as e:  # noqa: BLE001 - a report whatever breaks
        report["message"] = one_line("%s: %s" % (type(e).__name__, e), 300)
        report["memory_limited"] = _out_of_memory(e)
    report["seconds"]["total"] = round(time.perf_counter() - started, 3)
    return report


def _out_of_memory(e):
    """Whether `e` is the GPU running out of memory (harness.memory_error)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    from anvil.harness import memory_error

    return memory_error(e, torch) is not None


def main():
    return answer_one(PROTOCOL, warm)


def entry():
    """`python -I -c "...; warm.entry()"`: run, flush, and skip the interpreter's teardown."""
    exit_after(main)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.exit(status)
