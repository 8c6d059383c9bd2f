"""The CPU stage's filters of a composed task, each a reason recorded per task.

In order (the first that fails is the task's reason):

| stage | passes when |
|---|---|
| compose | the draw makes a chain whose shapes infer (compose.ComposeError otherwise) |
| duplicate | no earlier task (by index) that passed every filter has the same key (compose.Task.key): asked of `admit`, the scheduler that knows them, so a task that can only be a near-duplicate costs no filter |
| runtime_estimate | the eager runtime estimate at full size is within 1-100 ms (compose.WINDOW_MS) |
| decontaminate | neither the operator sequence of a KernelBench problem nor above the similarity threshold to one (decontam) |
| imports | the probe instance's source compiles and runs as a module (Model, get_inputs, get_init_inputs) |
| eager | Model(*get_init_inputs()).eval() on get_inputs() returns finite floating-point tensors |
| deterministic | a second model and inputs made under the same seeds, called with the random generator reseeded, give bitwise the same output |
| compile | torch.compile (backend COMPILE_BACKEND) gives the eager output within the strict fp32 tolerance |
| vet | `anvil vet` (anvil.vet, in this process) flags nothing: no zero, tiny, constant, input-equal or input-independent output |

The probe instance is the task with its batch at compose.PROBE_BATCH (same code, same parameters):
the CPU stage runs it, not the full size, which the GPU stage times. torch.compile's CPU stage uses
the `aot_eager` backend: dynamo's capture and AOTAutograd's decompositions, what fails in a compile
short of code generation; inductor's code generation takes about 4 s a graph on this machine's CPU,
and runs on the GPU stage.
"""
import json
import os
import tempfile
import time
import types

from anvil.synth import compose

COMPILE_BACKEND = "aot_eager"
FP32_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}  # the strict preset's float32 entry


class Rejected(Exception):
    def __init__(self, reason, detail=""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def _first_line(e):
    text = str(e).strip()
    return "%s: %s" % (type(e).__name__, text.splitlines()[0][:300]) if text else type(e).__name__


def load_module(code, name):
    module = types.ModuleType(name)
    module.__file__ = "<%s>" % name
    exec(compile(code, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the task under test
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, need):
            raise Rejected("imports", "the task defines no %s" % need)
    return module


def instance(module, torch):
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    torch.manual_seed(1)
    inputs = list(module.get_inputs())
    return model, inputs


def outputs(value, torch, stage="eager"):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise Rejected(stage, "the model returns %s, not tensors" % type(value).__name__)


class Checker:
    """The CPU stage for one process: the catalogue, the KernelBench index, a scratch folder."""

    def __init__(self, catalogue, index, threshold, scratch):
        import torch

        self.torch = torch
        self.catalogue, self.index, self.threshold, self.scratch = catalogue, index, threshold, scratch
        torch.set_num_threads(1)

    def run(self, seed, index, admit=None):
        """Task `index` of run `seed`'s record: accepted, or rejected with its stage and detail."""
        return self.check(lambda: compose.compose(self.catalogue, seed, index, self.torch), seed, index, admit)

    def check(self, make, seed, index, admit=None):
        """The record of the task `make()` composes (the compose stage is make's). `admit(key)`, when
        given, answers None (go on) or why the composed task is a duplicate of an accepted one."""
        torch = self.torch
        started = time.perf_counter()
        record = {"seed": seed, "index": index, "status": "rejected", "reason": None, "detail": "", "checks": {}}
        task = None
        try:
            with _stage(record, "compose"):
                try:
                    task = make()
                except compose.ComposeError as e:
                    raise Rejected("compose", "%s: %s" % (e.reason, e.detail))
            record.update(ops=task.ops, canonical_ops=task.canonical_ops, data_source=task.data_source(),
                          families=[s.op["family"] for s in task.steps],
                          key=task.key(), batch=task.batch, estimate=task.estimate,
                          input_shape=list(task.shapes[0]), output_shape=list(task.shapes[-1]))
            record["code"] = task.code()
            if admit is not None:
                with _stage(record, "duplicate"):
                    why = admit(record["key"])
                    if why:
                        raise Rejected("duplicate", why)
            with _stage(record, "runtime_estimate"):
                lo, hi = compose.WINDOW_MS
                if not lo <= task.estimate["ms"] <= hi:
                    raise Rejected("runtime_estimate", "estimated %.3g ms at batch %d, outside %g-%g ms" % (
                        task.estimate["ms"], task.batch, lo, hi))
            with _stage(record, "decontaminate"):
                found = self.index.check(record["code"], self.threshold, ops=task.canonical_ops)
                record["nearest"] = found["nearest"][0] if found["nearest"] else None
                record["nearest_all"] = found["nearest"]
                if found["contaminated"]:
                    same = (" (%s)" % ", ".join(found["same_ops"][:3])) if found["same_ops"] else ""
                    raise Rejected("decontaminate", "%s%s" % (found["reason"], same))
            probe = task.code(compose.PROBE_BATCH)
            with _stage(record, "imports"):
                module = load_module(probe, "synth_%d_%d" % (seed, index))
            with _stage(record, "eager"):
                model, inputs = instance(module, torch)
                with torch.no_grad():
                    eager = outputs(model(*inputs), torch)
                for t in eager:
                    if not t.is_floating_point():
                        raise Rejected("eager", "an output is %s, not floating point" % t.dtype)
                    if not bool(torch.isfinite(t).all()):
                        raise Rejected("eager", "an output holds NaN or Inf")
            with _stage(record, "deterministic"):
                # a second model and inputs made the same way, called with the generator elsewhere:
                # the reference a judge compares with must not depend on the random state
                model2, inputs2 = instance(module, torch)
                torch.manual_seed(0x5EED)
                with torch.no_grad():
                    again = outputs(model2(*inputs2), torch)
                if len(again) != len(eager) or not all(torch.equal(a, b) for a, b in zip(eager, again)):
                    raise Rejected("deterministic", "two runs of the same model on the same inputs differ")
            with _stage(record, "compile"):
                torch._dynamo.reset()
                compiled = torch.compile(model, backend=COMPILE_BACKEND)
                with torch.no_grad():
                    got = outputs(compiled(*inputs), torch, "compile")
                torch._dynamo.reset()
                if len(got) != len(eager):
                    raise Rejected("compile", "torch.compile returns %d outputs, eager %d" % (len(got), len(eager)))
                for a, b in zip(got, eager):
                    if a.shape != b.shape or not torch.allclose(a, b, **FP32_TOLERANCE):
                        raise Rejected("compile", "torch.compile's output differs from eager's (max |diff| %.3g)"
                                       % float((a - b).abs().max()) if a.shape == b.shape else "shapes differ")
            del model, model2, inputs, inputs2, eager, again
            with _stage(record, "vet"):
                self.vet(probe, record)
            record["status"] = "accepted"
        except Rejected as e:
            record["reason"], record["detail"] = e.reason, e.detail
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - a task's failure (sys.exit too) is its own: recorded
            stage = next((s for s, v in reversed(list(record["checks"].items())) if v == "running"), "compose")
            record["reason"], record["detail"] = stage, _first_line(e)
        for k, v in list(record["checks"].items()):
            if v == "running":
                record["checks"][k] = "failed"
        record["seconds"] = round(time.perf_counter() - started, 4)
        return record

    def vet(self, probe, record):
        from anvil import vet

        fd, path = tempfile.mkstemp(suffix=".py", dir=self.scratch)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(probe)
            report = vet.vet(json.dumps({"task_file": path, "device": "cpu", "seed": 0}))
        finally:
            os.unlink(path)
        if report.get("status") != "done":
            raise Rejected("vet", "anvil vet could not vet it: %s" % report.get("message", ""))
        flags = [f["flag"] for f in report.get("flags", [])]
        record["vet_notes"] = [n["flag"] for n in report.get("notes", [])]
        if flags:
            raise Rejected("vet", "degenerate: %s" % ", ".join(flags))


class _stage:
    """Marks a stage running, then passed (with its seconds) or, on an exception, failed."""

    def __init__(self, record, name):
        self.record, self.name = record, name

    def __enter__(self):
        self.record["checks"][self.name] = "running"
        self.t0 = time.perf_counter()

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.record["checks"][self.name] = round(time.perf_counter() - self.t0, 4)
        elif not issubclass(kind, KeyboardInterrupt):
            self.record["checks"][self.name] = "failed"
            if not isinstance(value, Rejected):
                raise Rejected(self.name, _first_line(value)) from value
        return False

