"""python -m anvil.task_probe FILE [--seed N] [--no-forward] [--device DEV]: describe a task.

A task is a KernelBench-format file: `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`.
The file is imported as a fresh module (cwd and sys.path unchanged), the model is built from
get_init_inputs() and, unless --no-forward, run once on get_inputs() (on the CPU by default).
torch.manual_seed(seed) is set before each of get_init_inputs(), Model(...) and get_inputs().

Prints one JSON object:
  {"ok": true, "file", "seed",
   "model": {"init_signature", "init_params", "parameters", "buffers"},
   "init_inputs": [value], "inputs": [value], "output": value or null}
where a value is {"type": "tensor", "shape", "dtype"}, {"type": "int"|"float"|"bool"|"str",
"value"}, {"type": "list"|"tuple", "items"}, ... (see `describe`); or, when the task is at fault,
  {"ok": false, "outcome": "task_error", "file", "cause": one line, "detail": traceback tail}.
Exit status 0 in both cases; 2 on bad arguments or a crash of the probe itself.
"""
import inspect
import os
import random
import sys
import traceback
import types

from anvil._cli import ArgumentParser, UsageError, emit, one_line, quiet_stdout, tail

MODULE_NAME = "anvil_task"
_MODULE_CALL_FILE = os.path.join("torch", "nn", "modules", "module.py")


class TaskError(Exception):
    """The task file is at fault; `cause` is one line naming the file, `detail` the evidence."""

    def __init__(self, cause, detail=""):
        super().__init__(cause)
        self.cause = cause
        self.detail = detail or cause


def _trace(exc):
    """The traceback of `exc` without the leading frames of the probe and of nn.Module.__call__
    (they are the same for every task), last 15 lines."""
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == __file__
                              or tb.tb_frame.f_code.co_filename.endswith(_MODULE_CALL_FILE)):
        tb = tb.tb_next
    return tail("".join(traceback.format_exception(type(exc), exc, tb)), 15)


def _what(exc):
    message = one_line(str(exc))
    return "%s: %s" % (type(exc).__name__, message) if message else type(exc).__name__


def _run(cause_prefix, fn, *args):
    """fn(*args), turning any exception (SystemExit too) into a TaskError."""
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - the task's failure is the answer
        raise TaskError("%s raised %s" % (cause_prefix, _what(e)), _trace(e))


def load_task(path):
    """Import the task file at `path` as a fresh module and return it."""
    if not os.path.exists(path):
        raise TaskError("task file not found: %s" % path)
    if os.path.isdir(path):
        raise TaskError("task file is a directory: %s" % path)
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise TaskError("cannot read task file %s: %s" % (path, e.strerror or e))
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        detail = "".join(traceback.format_exception_only(type(e), e))
        raise TaskError("%s:%s: syntax error: %s" % (path, e.lineno, e.msg), tail(detail))
    except ValueError as e:  # null bytes on Python 3.11
        raise TaskError("%s: syntax error: %s" % (path, e))
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = os.path.abspath(path)
    sys.modules[MODULE_NAME] = module  # dataclasses and pickling look modules up by name
    _run("%s: importing the task" % path, exec, code, module.__dict__)
    return module


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def describe(value, depth=0):
    """A JSON description of a constructor argument, an input or an output."""
    import torch

    if isinstance(value, torch.Tensor):
        return {"type": "tensor", "shape": list(value.shape), "dtype": dtype_name(value.dtype)}
    if value is None:
        return {"type": "none"}
    if isinstance(value, (bool, int, float, str)):
        return {"type": type(value).__name__, "value": value}
    if isinstance(value, torch.dtype):
        return {"type": "dtype", "value": dtype_name(value)}
    if isinstance(value, (list, tuple)) and depth < 8:
        return {"type": "tuple" if isinstance(value, tuple) else "list",
                "items": [describe(v, depth + 1) for v in value]}
    if isinstance(value, dict) and depth < 8:
        return {"type": "dict", "items": {str(k): describe(v, depth + 1) for k, v in value.items()}}
    text = repr(value)
    return {"type": type(value).__name__, "repr": text if len(text) <= 200 else text[:197] + "..."}


def _tensors(named):
    return [{"name": n, "shape": list(t.shape), "dtype": dtype_name(t.dtype)} for n, t in named]


def _signature(model_class):
    try:
        sig = inspect.signature(model_class.__init__)
    except (TypeError, ValueError):
        return None, []
    return str(sig), list(sig.parameters)[1:]


def _call_list(path, module, name):
    fn = getattr(module, name, None)
    if fn is None:
        raise TaskError("%s: no function `%s` defined" % (path, name))
    if not callable(fn):
        raise TaskError("%s: `%s` is not a function (it is a %s)" % (path, name, type(fn).__name__))
    result = _run("%s: %s()" % (path, name), fn)
    if not isinstance(result, (list, tuple)):
        raise TaskError("%s: %s() returned %s, expected a list or tuple"
                        % (path, name, type(result).__name__))
    return list(result)


def probe_task(path, seed=0, forward=True, device="cpu"):
    """The description of the task at `path` (see the module docstring); raises TaskError."""
    import torch

    module = load_task(path)
    model_class = getattr(module, "Model", None)
    if model_class is None:
        raise TaskError("%s: no class `Model` defined" % path)
    if not (isinstance(model_class, type) and issubclass(model_class, torch.nn.Module)):
        what = "class %s" % model_class.__name__ if isinstance(model_class, type) else type(model_class).__name__
        raise TaskError("%s: `Model` is not a torch.nn.Module subclass (it is %s)" % (path, what))

    torch.manual_seed(seed)
    random.seed(seed)
    init_inputs = _call_list(path, module, "get_init_inputs")
    torch.manual_seed(seed)
    model = _run("%s: Model(*get_init_inputs())" % path, model_class, *init_inputs)
    torch.manual_seed(seed)
    inputs = _call_list(path, module, "get_inputs")

    output = None
    if forward:
        args = inputs
        if device != "cpu":
            model = model.to(device)
            args = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            output = describe(_run("%s: Model.forward(*get_inputs())" % path, model, *args))

    signature, params = _signature(model_class)
    return {
        "ok": True,
        "file": path,
        "seed": seed,
        "model": {
            "init_signature": signature,
            "init_params": params,
            "parameters": _tensors(model.named_parameters()),
            "buffers": _tensors(model.named_buffers()),
        },
        "init_inputs": [describe(v) for v in init_inputs],
        "inputs": [describe(v) for v in inputs],
        "output": output,
    }


def main(argv=None):
    path = None
    try:
        parser = ArgumentParser(prog="python -m anvil.task_probe", description="Describe a task file.")
        parser.add_argument("file")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--no-forward", dest="forward", action="store_false",
                            help="do not run Model.forward")
        parser.add_argument("--device", default="cpu", help="device for the forward (default cpu)")
        args = parser.parse_args(argv)
        path = args.file
        with quiet_stdout():
            try:
                result = probe_task(args.file, args.seed, args.forward, args.device)
            except TaskError as e:
                result = {"ok": False, "outcome": "task_error", "file": args.file,
                          "cause": e.cause, "detail": e.detail}
        emit(result)
        return 0
    except UsageError as e:
        emit({"ok": False, "outcome": "usage_error", "file": path, "cause": str(e), "detail": str(e)})
        return 2
    except Exception as e:  # noqa: BLE001 - a crash of the probe still answers in JSON
        emit({"ok": False, "outcome": "probe_error", "file": path,
              "cause": "anvil.task_probe crashed: %s" % _what(e),
              "detail": tail(traceback.format_exc(), 15)})
        return 2


if __name__ == "__main__":
    sys.exit(main())
