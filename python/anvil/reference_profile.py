"""anvil.reference_profile: where the reference's time goes, for the agent's profile_reference tool
and `anvil task profile` (src/anvil/env/reference_profile.h runs it and formats the answer).

Model(*get_init_inputs()) (seed 0) on the task's inputs (seeds 1, 2, ..., rotated; one set where a
set is 1 GiB or more, as the judge's lean rule), timed as the judge times the baselines
(anvil.timing.measure: CUDA events around each call, L2 flushed, launch latency hidden, the median),
eager and torch.compile (the judge's compile baseline, anvil.timing.compiled), TF32 as the
evaluation's flags have it (off by default); then, on a GPU, the kernels each launches, from the profiled calls
that follow the timed ones (per forward: launches, milliseconds, share of the GPU time), the work of
one call (FLOPs of matrix products and convolutions by torch's FlopCounterMode; the fewest bytes it
must move: inputs, parameters, buffers and outputs, each once) and the GPU's peaks (a 1 GiB copy's
bandwidth; an fp32 matrix product's rate with TF32 off, the precision the judge holds a candidate
to). On the CPU: the times and what takes them (self CPU time of aten ops and compiled regions).

The task's module, its model and its inputs are made on the host first; only then is the GPU's lock
(the request's gpu_lock, exclusive, as a measurement of baselines takes it) asked for, so the host's
work keeps nobody waiting.

One request on stdin, one report on fd 3 (anvil.zygote's child) or as stdout's last line:
  request {"protocol": "anvil.reference-profile/1", "task_file", "device": "cuda"|"cpu",
           "compile_mode": "default"|MODE|"none", "warmup", "calls", "input_sets", "allow_tf32",
           "top" (rows kept per model, default 50), "gpu_lock": PATH (optional)}
  report  {"protocol", "status": "done", "device", "gpu", "torch", "method": {...},
           "eager": PART, "compile": PART | null, "work": {"flops", "bytes", "input_bytes",
           "parameter_bytes", "output_bytes"} | {"error"}, "peaks": {"bandwidth_bytes_per_s",
           "fp32_flops_per_s"} | null, "seconds"}
where PART is {"ms", "min_ms", "p25_ms", "p75_ms", "kernel_sum_ms", "launches", "kernels": [{"name",
"launches", "ms", "share"}]} ("ops" in place of "kernels" on the CPU), or {"error": one line} when
that model failed (torch.compile of a reference inductor cannot compile); peaks {"error"} where they
could not be measured. A failing task: {"status": "error", "outcome": "task_error", "message",
"detail"}; out of GPU memory: {"status": "error", "outcome": "gpu_memory", "message"}; a bad
request: {"status": "error", "message"}.
"""
import json
import sys
import time

from anvil import share
from anvil._cli import answer_one, exit_after, one_line, quiet_stdout, tail

PROTOCOL = "anvil.reference-profile/1"

ROWS = 50  # kernels (ops on the CPU) kept per model; the tool shows the first `top`
NAME_CHARS = 160  # a kernel's name as shown (templated library kernels run to thousands)


def _inputs(module, torch, device, seed):
    from anvil.harness import map_tensors

    torch.manual_seed(seed)
    return tuple(map_tensors(list(module.get_inputs()), lambda t: t.to(device)))


def _rows(totals, calls, top):
    """{name: [launches, ms]} over `calls` forwards to the `top` rows per forward, by time, each with
    its share of the total."""
    total = sum(ms for _n, ms in totals.values())
    rows = [{"name": name[:NAME_CHARS], "launches": round(n / calls, 3), "ms": ms / calls,
             "share": ms / total if total > 0 else None}
            for name, (n, ms) in sorted(totals.items(), key=lambda kv: -kv[1][1])]
    return rows[:top]


def _kernels(trace, calls, top):
    totals = {}
    for k in trace.get("kernels", []):
        row = totals.setdefault(k["name"], [0, 0.0])
        row[0] += 1
        row[1] += k["us"] / 1e3
    return _rows(totals, calls, top)


def _cpu_ops(fn, sets, calls, top):
    """What `calls` calls do on the CPU, by self CPU time (an op inside another counts once): aten ops,
    and torch.compile's own code under its region's names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for k in range(calls):
            fn(*sets[k % len(sets)])
    totals = {e.key: [e.count, e.self_cpu_time_total / 1e3] for e in prof.key_averages() if e.self_cpu_time_total > 0}
    return _rows(totals, calls, top)


def _part(fn, sets, device, args, top):
    from anvil import timing

    cuda = device == "cuda"
    trace = {} if cuda else None
    result = timing.measure(fn, sets, device, warmup=args.warmup, calls=args.calls, trace=trace)
    part = {"ms": result["median_ms"], "min_ms": result["min_ms"], "p25_ms": result["p25_ms"], "p75_ms": result["p75_ms"],
            "kernel_sum_ms": result.get("kernel_sum_ms")}
    if cuda:
        calls = max(1, trace.get("calls") or 1)
        part["launches"] = round(len(trace.get("kernels", [])) / calls, 3)
        part["kernels"] = _kernels(trace, calls, top)
        if trace.get("profiler_error"):
            part["profiler_error"] = one_line(trace["profiler_error"])
    else:
        part["ops"] = _cpu_ops(fn, sets, timing.inspected_calls(args.calls), top)
    return part


def _work(module_model, sets, torch):
    from torch.utils.flop_counter import FlopCounterMode

    from anvil.harness import tensor_bytes

    counter = FlopCounterMode(display=False)
    with counter:
        out = module_model(*sets[0])
    params = sum(t.numel() * t.element_size() for t in list(module_model.parameters()) + list(module_model.buffers()))
    inputs, outputs = tensor_bytes(list(sets[0])), tensor_bytes(out)
    return {"flops": int(counter.get_total_flops()), "bytes": inputs + params + outputs, "input_bytes": inputs,
            "parameter_bytes": params, "output_bytes": outputs}


def _peaks(device, torch):
    """The GPU's copy bandwidth and fp32 matrix rate (TF32 off); None where they cannot be measured
    (the task's memory left no room: the floor is then not given, the rest stands)."""
    from anvil import evidence

    m = 8192
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        a = torch.randn(m, m, device=device)
        b = torch.randn(m, m, device=device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.mm(a, b)
        fp32 = 2 * m ** 3 / evidence.best_seconds(lambda: torch.mm(a, b))
        del a, b
        return {"bandwidth_bytes_per_s": evidence.measure_bandwidth(device), "fp32_flops_per_s": fp32}
    except Exception as e:  # noqa: BLE001 - out of memory beside the task's tensors
        return {"error": "%s: %s" % (type(e).__name__, one_line(e))}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


class Request:
    """The request's fields, checked (RequestError names the first that is wrong)."""

    def __init__(self, text):
        try:
            req = json.loads(text)
        except ValueError as e:
            raise RequestError("not JSON: %s" % e)
        if not isinstance(req, dict) or req.get("protocol") != PROTOCOL:
            raise RequestError("protocol: %s is required" % PROTOCOL)
        self.task = req.get("task_file")
        self.device = req.get("device", "cuda")
        self.compile_mode = req.get("compile_mode", "default")
        defaults = share.timing()
        self.warmup, self.calls = req.get("warmup", defaults["warmup"]), req.get("calls", defaults["calls"])
        self.input_sets, self.top = req.get("input_sets", defaults["input_sets"]), req.get("top", ROWS)
        self.allow_tf32 = req.get("allow_tf32", False)
        self.gpu_lock = req.get("gpu_lock")
        if not isinstance(self.task, str) or not self.task:
            raise RequestError("task_file: a path is required")
        if self.device not in ("cuda", "cpu"):
            raise RequestError("device: cuda or cpu is required")
        if not isinstance(self.compile_mode, str):
            raise RequestError("compile_mode: a string is required")
        for name, low in (("warmup", 0), ("calls", 1), ("input_sets", 1), ("top", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise RequestError("%s: an integer of at least %d is required" % (name, low))
        if not isinstance(self.allow_tf32, bool):
            raise RequestError("allow_tf32: true or false is required")
        if self.gpu_lock is not None and not isinstance(self.gpu_lock, str):
            raise RequestError("gpu_lock: a path is required")


class RequestError(Exception):
    pass


def _failed(e, torch):
    """The report of a reference that failed: out of memory is the GPU's limit, anything else the task's."""
    from anvil.harness import memory_error

    what = "%s: %s" % (type(e).__name__, one_line(e))
    if memory_error(e, torch) is not None:
        return {"status": "error", "outcome": "gpu_memory", "message": "the GPU ran out of memory: " + what}
    return {"status": "error", "outcome": "task_error", "message": what, "detail": tail(repr(e))}


def _prepare(args, torch):
    """The reference and its input sets, made on the host (before the GPU's lock is asked for): as
    the judge, one set where a set is LEAN_BYTES or more (a large task's inputs are drawn per use)."""
    from anvil import task_probe
    from anvil.harness import LEAN_BYTES, tensor_bytes

    module = task_probe.load_task(args.task)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    first = _inputs(module, torch, "cpu", 1)
    count = 1 if tensor_bytes(list(first)) >= LEAN_BYTES else args.input_sets
    return model, [first] + [_inputs(module, torch, "cpu", 1 + i) for i in range(1, count)]


def profile(args):
    """The report's body for a checked request (Request)."""
    from anvil import task_probe, timing
    from anvil.harness import map_tensors

    import torch

    device = args.device
    # The judge's baselines: TF32 as the evaluation's flags have it (off unless asked for).
    torch.backends.cuda.matmul.allow_tf32 = args.allow_tf32
    torch.backends.cudnn.allow_tf32 = args.allow_tf32
    try:
        model, host_sets = _prepare(args, torch)
    except task_probe.TaskError as e:
        return {"status": "error", "outcome": "task_error", "message": e.cause, "detail": e.detail}
    except Exception as e:  # noqa: BLE001 - the task's failure is its answer
        return _failed(e, torch)
    # The GPU's lock, exclusive, only now: the host's work above kept nobody waiting.
    lock = timing.GpuLock(args.gpu_lock) if args.gpu_lock and device == "cuda" else None
    try:
        model = model.to(device)
        sets = [tuple(map_tensors(list(s), lambda t: t.to(device))) for s in host_sets]
        del host_sets
        with torch.no_grad():
            model(*sets[0])
    except Exception as e:  # noqa: BLE001
        return _failed(e, torch)
    report = {"status": "done", "device": device, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
              "method": {"timing": "cuda_events" if device == "cuda" else "wall_clock", "warmup": args.warmup,
                         "calls": args.calls, "flush_l2": device == "cuda", "input_sets": len(sets),
                         "allow_tf32": args.allow_tf32}}
    with torch.no_grad():
        report["eager"] = _part(model, sets, device, args, args.top)
        report["compile"] = None
        if args.compile_mode != "none":
            try:
                report["compile"] = _part(timing.compiled(torch, model, args.compile_mode), sets, device, args, args.top)
            except Exception as e:  # noqa: BLE001 - a reference inductor cannot compile: said, eager stands
                report["compile"] = {"error": "%s: %s" % (type(e).__name__, one_line(e))}
        try:
            report["work"] = _work(model, sets, torch)
        except Exception as e:  # noqa: BLE001 - no count: the floor is not given
            report["work"] = {"error": "%s: %s" % (type(e).__name__, one_line(e))}
    del sets
    report["peaks"] = _peaks(device, torch) if device == "cuda" else None
    if lock is not None:
        report["gpu_lock_waited_s"] = round(lock.waited_s, 3)
    return report


def handle(text):
    """The report for one request (never raises, but for KeyboardInterrupt)."""
    started = time.perf_counter()
    try:
        with quiet_stdout():
            report = profile(Request(text))
    except RequestError as e:
        report = {"status": "error", "message": "bad request: %s" % e}
    except Exception as e:  # noqa: BLE001 - a report even when the profile itself breaks
        report = {"status": "error", "message": "anvil.reference_profile failed: %s: %s" % (type(e).__name__, one_line(e)),
                  "detail": tail(repr(e))}
    report["protocol"] = PROTOCOL
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def main():
    """One request on stdin, one report on fd 3 when it is open (anvil.zygote's child), else the
    last line of stdout."""
    return answer_one(PROTOCOL, handle)


def entry():
    """`python -I -c "...; reference_profile.entry()"` (anvil's fresh process)."""
    exit_after(main)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.exit(status)
