"""python -m anvil.runner: verify and time one candidate against its task (protocol anvil.runner/1).

docs/runner-protocol.md is the contract; this is its Python side. `anvil eval` writes one JSON
request on stdin and reads one JSON report from file descriptor 3 (when fd 3 is not open, as in a
manual run, the report is the last line of stdout). Whatever the task or the candidate does (raise,
exit(), print, return the wrong thing), the runner writes exactly one report and exits 0; only a
process that dies writes none. A malformed request, or a device that is not there, gives status
"error" and exit status 2: anvil, not the candidate, is at fault then.

The pieces that touch torch live here: loading the task and the candidate, the reference check, the
trials (candidate, reference, candidate on clones of each trial's inputs), the input-mutation check,
and timing (anvil.timing). Comparison is anvil.compare. The reward is decided by anvil, from the
report, never here.

Defaults for fields a request leaves out are those of the protocol's example request (strict
tolerances, flags off, 5 trials, timing of candidate, eager and compile).
"""
import importlib.util
import inspect
import json
import os
import random
import stat
import sys
import time
import traceback

from anvil import compare, timing
from anvil._cli import _finite, one_line, tail

PROTOCOL = "anvil.runner/1"
DETAIL_LINES = 30
DETAIL_CHARS = 8000
MESSAGE_CHARS = 500
MEASURABLE = ("candidate", "eager", "compile")
OUTCOMES = ("task_error", "load_error", "runtime_error", "wrong_answer", "hack_suspected")

STRICT = {"preset": "strict",
          "float32": {"atol": 1e-4, "rtol": 1e-4, "norm": 1e-5},
          "float16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-3},
          "bfloat16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-2},
          "float64": {"atol": 1e-7, "rtol": 1e-7, "norm": 1e-9}}
FLAGS = {"allow_tf32": False, "cudnn_allow_tf32": False, "cudnn_benchmark": False,
         "cudnn_deterministic": False}
TIMING = {"measure": ["candidate", "eager", "compile"], "warmup": 5, "calls": 30, "input_sets": 4,
          "flush_l2": True, "kernel_sum": True, "compile_mode": "default", "hide_launch": True}
DEFENSES = {"enabled": True, "policy": None, "allow_lower_precision": False, "roofline": {},
            "roofline_slack": 1.25, "precision_ratio": 16.0, "cuobjdump": None}

_REPORT_FD = None  # the report's descriptor: the candidate's process closes it first thing
_DONE_FD = None    # the zygote's report-complete pipe (ANVIL_DONE_FD): likewise
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_MODULE_CALL_FILE = os.path.join("torch", "nn", "modules", "module.py")


class RequestError(Exception):
    """The request is malformed or cannot be served here (status "error")."""


class Outcome(Exception):
    """Ends the evaluation with one of OUTCOMES; `message` is model-readable, `detail` evidence,
    `reason` a finer name (docs/anti-hacking.md)."""

    def __init__(self, outcome, message, detail="", reason=None):
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.detail = detail
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# Request and report

def parse_request(text):
    """The request with defaults filled in; raises RequestError."""
    try:
        request = json.loads(text)
    except ValueError as e:
        raise RequestError("the request is not JSON: %s" % e)
    if not isinstance(request, dict):
        raise RequestError("the request is not a JSON object")
    if request.get("protocol") != PROTOCOL:
        raise RequestError("protocol %r, expected %r" % (request.get("protocol"), PROTOCOL))
    for key in ("task_file", "candidate_dir"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise RequestError("%s: a non-empty string is required" % key)
    if not os.path.isdir(request["candidate_dir"]):
        raise RequestError("candidate_dir %s is not a directory" % request["candidate_dir"])
    out = dict(request)
    out.setdefault("candidate_kind", "workdir")
    out.setdefault("device", "cuda")
    out.setdefault("seed", 0)
    out.setdefault("trials", 5)
    out["tolerance"] = request.get("tolerance") if request.get("tolerance") is not None else dict(STRICT)
    out["flags"] = dict(FLAGS, **(request.get("flags") or {}))
    out["timing"] = dict(TIMING, **(request.get("timing") or {}))
    defenses = request.get("defenses")
    if defenses is False:
        defenses = {"enabled": False}
    if not isinstance(defenses or {}, dict):
        raise RequestError("defenses: an object or false is required")
    out["defenses"] = dict(DEFENSES, **(defenses or {}))
    if out["defenses"]["policy"] is None:
        from anvil import policy

        out["defenses"]["policy"] = dict(policy.DEFAULT_POLICY)
    elif not isinstance(out["defenses"]["policy"], dict) or not isinstance(
            out["defenses"]["policy"].get("allowed_ops", []), list):
        raise RequestError("defenses.policy: an object with a list allowed_ops is required")
    else:
        from anvil import policy

        out["defenses"]["policy"] = dict(policy.DEFAULT_POLICY, **out["defenses"]["policy"])
    if out["candidate_kind"] not in ("workdir", "file"):
        raise RequestError("candidate_kind %r, expected \"workdir\" or \"file\"" % out["candidate_kind"])
    if not isinstance(out["device"], str):
        raise RequestError("device: a string is required")
    _check_int(out, "seed", None)
    _check_int(out, "trials", 1)
    if not isinstance(out["tolerance"], dict):
        raise RequestError("tolerance: an object is required")
    for name, entry in out["tolerance"].items():
        if name != "preset" and not (isinstance(entry, dict) and all(
                isinstance(entry.get(k, 0), (int, float)) or (k == "norm" and entry.get(k) is None)
                for k in ("atol", "rtol", "norm"))):
            raise RequestError("tolerance.%s: {atol, rtol, norm} numbers are required" % name)
    t = out["timing"]
    if not isinstance(t["measure"], list) or any(m not in MEASURABLE for m in t["measure"]):
        raise RequestError("timing.measure: a list of %s is required" % ", ".join(MEASURABLE))
    _check_int(t, "warmup", 0, "timing.")
    _check_int(t, "calls", 1, "timing.")
    _check_int(t, "input_sets", 1, "timing.")
    if not isinstance(t["compile_mode"], str):
        raise RequestError("timing.compile_mode: a string is required")
    return out


def _check_int(obj, key, minimum, prefix=""):
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise RequestError("%s%s: an integer%s is required" % (
            prefix, key, "" if minimum is None else " >= %d" % minimum))


def new_report():
    return {
        "protocol": PROTOCOL,
        "status": "done",
        "outcome": None,
        "reason": None,
        "message": "",
        "detail": "",
        "verify": {"trials": [], "passed": 0, "failed": 0},
        "timing": {},
        "env": {"torch": None, "cuda": None, "device_name": None, "capability": None, "driver": None},
        "seconds": {"import": 0.0, "verify": 0.0, "timing": 0.0},
    }


class ReportChannel:
    """Where the one report goes: a private duplicate of fd 3 (which is then closed, so candidate
    code cannot write there by number), else of fd 1. send() writes once; later calls do nothing."""

    def __init__(self):
        self.fd = None
        try:
            mode = os.fstat(3).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode):
                self.fd = os.dup(3)
                os.close(3)
        except OSError:
            self.fd = None
        self.to_stdout = self.fd is None
        if self.to_stdout:
            self.fd = os.dup(1)
        self.sent = False
        self.done = None  # a pipe told "1" once the report is written (anvil.zygote)
        try:
            fd = int(os.environ.pop("ANVIL_DONE_FD", ""))
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                self.done = os.dup(fd)
                os.close(fd)
        except (ValueError, OSError):
            self.done = None
        global _REPORT_FD, _DONE_FD
        _REPORT_FD = self.fd
        _DONE_FD = self.done

    def send(self, report):
        if self.sent:
            return
        self.sent = True
        try:
            text = json.dumps(_finite(report), allow_nan=False)
        except (TypeError, ValueError) as e:  # never expected: the report holds plain values
            text = json.dumps({"protocol": PROTOCOL, "status": "error", "outcome": None,
                               "message": "the runner could not encode its report: %s" % e})
        data = (text + "\n").encode("utf-8")
        for stream in (sys.stdout, sys.stderr):  # the output is complete before the report is
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the candidate may have closed them
                pass
        written = False
        try:
            while data:
                data = data[os.write(self.fd, data):]
            written = True
        except OSError:
            pass  # anvil went away; nothing to tell
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self.done is not None:
            try:
                if written:
                    os.write(self.done, b"1")  # the report is complete: the process need not be waited for
                os.close(self.done)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------
# Small helpers

def _what(exc):
    message = one_line(str(exc), MESSAGE_CHARS)
    return "%s: %s" % (type(exc).__name__, message) if message else type(exc).__name__


def _is_ours(filename):
    return os.path.dirname(os.path.abspath(filename)) == _PACKAGE_DIR or filename.endswith(_MODULE_CALL_FILE)


def _trace(exc):
    """The traceback of `exc` without the leading frames of the runner and nn.Module.__call__,
    at most DETAIL_LINES lines."""
    tb = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is None:
        tb = exc.__traceback__
    text = tail("".join(traceback.format_exception(type(exc), exc, tb)), DETAIL_LINES)
    return text if len(text) <= DETAIL_CHARS else "..." + text[-DETAIL_CHARS:]


def _raised(exc, who):
    """The message for an exception raised by `who` (exit() is named as such)."""
    if isinstance(exc, SystemExit):
        return "%s called exit()%s" % (who, "" if exc.code is None else " (status %r)" % (exc.code,))
    return "%s raised %s" % (who, _what(exc))


def _map_tensors(value, fn, depth=0):
    """`value` with fn applied to every tensor inside lists, tuples and dicts; others unchanged."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if depth < 32 and isinstance(value, (list, tuple)):
        items = [_map_tensors(v, fn, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if depth < 32 and isinstance(value, dict):
        return {k: _map_tensors(v, fn, depth + 1) for k, v in value.items()}
    return value


def _tensor_pairs(a, b, where, depth=0):
    """(name, tensor of a, tensor of b) for every tensor of `a` (same structure as `b`)."""
    import torch

    if isinstance(a, torch.Tensor):
        yield where, a, b
    elif depth < 32 and isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _tensor_pairs(x, y, "%s.%d" % (where, i) if depth else "%s %d" % (where, i), depth + 1)
    elif depth < 32 and isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k in b:
                yield from _tensor_pairs(a[k], b[k], "%s[%r]" % (where, k), depth + 1)


def _signature(cls):
    try:
        return inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None


def _signature_key(sig):
    """What must match between the constructors: names, kinds and defaults (not annotations)."""
    params = list(sig.parameters.values())[1:]
    return [(p.name, p.kind, repr(p.default)) for p in params]


def _state_dict_difference(expected, got):
    """A message naming missing keys, unexpected keys and shape mismatches, or None."""
    missing = [k for k in got if k not in expected]
    unexpected = [k for k in expected if k not in got]
    shapes = ["%s (ModelNew %s, Model %s)" % (k, list(got[k].shape), list(expected[k].shape))
              for k in expected if k in got and hasattr(got[k], "shape") and hasattr(expected[k], "shape")
              and tuple(got[k].shape) != tuple(expected[k].shape)]
    parts = []
    if missing:
        parts.append("missing keys (in ModelNew, not in Model): " + ", ".join(missing))
    if unexpected:
        parts.append("unexpected keys (in Model, not in ModelNew): " + ", ".join(unexpected))
    if shapes:
        parts.append("shape mismatches: " + ", ".join(shapes))
    if not parts:
        return None
    return "ModelNew's parameters and buffers differ from Model's: " + "; ".join(parts)


def _driver_version():
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    import re

    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    if match:
        return match.group(1)
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def _cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


# ---------------------------------------------------------------------------------------------
# The evaluation

class Evaluation:
    """One request's evaluation; fills `report` as it goes and raises Outcome to stop."""

    def __init__(self, request, report):
        self.req = request
        self.report = report
        self.stage = "setup"
        self.torch = None
        self.device = None
        self.kept_inputs = {}  # trial -> inputs, for trials that are also timing's base sets
        self.shared = None  # a channel.SharedInputs in a defended evaluation: half the trials come from the other side

    # -- setup ------------------------------------------------------------------------------
    def setup(self):
        import torch

        self.torch = torch
        try:
            self.device = torch.device(self.req["device"])
        except (RuntimeError, ValueError) as e:
            raise RequestError("device %r: %s" % (self.req["device"], e))
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise RequestError("device cuda: CUDA is not available to this torch (%s)" % torch.__version__)
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
        elif self.device.type != "cpu":
            raise RequestError("device %r: only cuda and cpu are supported" % self.req["device"])
        env = self.report["env"]
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if self.device.type == "cuda":
            env["device_name"] = torch.cuda.get_device_name(self.device)
            env["capability"] = "%d.%d" % torch.cuda.get_device_capability(self.device)
            env["driver"] = _driver_version()
        else:
            env["device_name"] = _cpu_name()
        self.pin_flags()

    def pin_flags(self):
        """Set the precision flags of the request (again before every reference or timed model, so
        a candidate that flips them cannot change the reference's arithmetic)."""
        flags = self.req["flags"]
        backends = self.torch.backends
        backends.cuda.matmul.allow_tf32 = bool(flags["allow_tf32"])
        backends.cudnn.allow_tf32 = bool(flags["cudnn_allow_tf32"])
        backends.cudnn.benchmark = bool(flags["cudnn_benchmark"])
        backends.cudnn.deterministic = bool(flags["cudnn_deterministic"])

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def seed_all(self, seed):
        self.torch.manual_seed(seed)
        random.seed(seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(seed % (1 << 32))

    # -- task and models --------------------------------------------------------------------
    def load_task(self):
        from anvil import task_probe

        self.stage = "task"
        path = self.req["task_file"]
        try:
            module = task_probe.load_task(path)
        except task_probe.TaskError as e:
            raise Outcome("task_error", e.cause, e.detail)
        model = getattr(module, "Model", None)
        if not (isinstance(model, type) and issubclass(model, self.torch.nn.Module)):
            raise Outcome("task_error", "%s: no class `Model` (a torch.nn.Module subclass) defined" % path)
        for name in ("get_inputs", "get_init_inputs"):
            if not callable(getattr(module, name, None)):
                raise Outcome("task_error", "%s: no function `%s` defined" % (path, name))
        self.task = module
        self.Model = model

    def _call_list(self, name):
        path = self.req["task_file"]
        try:
            result = getattr(self.task, name)()
        except BaseException as e:  # noqa: BLE001 - the task's failure is the answer
            raise Outcome("task_error", _raised(e, "%s: %s()" % (path, name)), _trace(e))
        if not isinstance(result, (list, tuple)):
            raise Outcome("task_error", "%s: %s() returned %s, expected a list or tuple"
                          % (path, name, type(result).__name__))
        return list(result)

    def build_reference(self):
        seed = self.req["seed"]
        self.seed_all(seed)
        self.init = self._call_list("get_init_inputs")
        self.seed_all(seed)
        try:
            ref = self.Model(*_map_tensors(self.init, lambda t: t.clone()))
            ref = ref.eval().to(self.device)
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", _raised(e, "Model(*get_init_inputs())"), _trace(e))
        self.ref = ref

    def import_candidate(self):
        self.stage = "load"
        directory = os.path.abspath(self.req["candidate_dir"])
        path = os.path.join(directory, "model_new.py")
        if not os.path.isfile(path):
            raise Outcome("load_error", "no model_new.py in the candidate directory")
        sys.path.insert(0, directory)
        os.chdir(directory)
        if self.req["candidate_kind"] == "file":
            from anvil import load_inline

            load_inline.install()
        try:
            spec = importlib.util.spec_from_file_location("model_new", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["model_new"] = module
            spec.loader.exec_module(module)
        except SyntaxError as e:
            where = os.path.basename(e.filename) if e.filename else "model_new.py"
            raise Outcome("load_error", "%s:%s: syntax error: %s" % (where, e.lineno, e.msg),
                          tail("".join(traceback.format_exception_only(type(e), e)), DETAIL_LINES))
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", _raised(e, "importing model_new.py"), _trace(e))
        cls = getattr(module, "ModelNew", None)
        if not (isinstance(cls, type) and issubclass(cls, self.torch.nn.Module)):
            raise Outcome("load_error", "model_new.py defines no class `ModelNew` (a torch.nn.Module subclass)")
        ref_sig, new_sig = _signature(self.Model), _signature(cls)
        if ref_sig is not None and new_sig is not None and _signature_key(ref_sig) != _signature_key(new_sig):
            raise Outcome("load_error", "ModelNew.__init__%s differs from Model.__init__%s: the constructor "
                          "must take the same arguments" % (new_sig, ref_sig))
        self.ModelNew = cls

    def build_candidate(self):
        self.seed_all(self.req["seed"])
        try:
            new = self.ModelNew(*_map_tensors(self.init, lambda t: t.clone()))
            if not isinstance(new, self.torch.nn.Module):
                raise TypeError("ModelNew(...) is not a torch.nn.Module")
            new = new.eval().to(self.device)
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", _raised(e, "ModelNew(*get_init_inputs())"), _trace(e))
        try:
            expected = self.ref.state_dict()
            got = new.state_dict()
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", _raised(e, "ModelNew.state_dict()"), _trace(e))
        difference = _state_dict_difference(expected, got)
        if difference:
            raise Outcome("load_error", difference)
        try:
            new.load_state_dict(expected, strict=True)
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", _raised(e, "ModelNew.load_state_dict(Model's state_dict, strict=True)"),
                          _trace(e))
        self.new = new

    # -- calls ------------------------------------------------------------------------------
    def host_inputs(self, seed):
        """get_inputs() after seeding with `seed`, as the task makes them (usually on the host)."""
        self.seed_all(seed)
        return self._call_list("get_inputs")

    def to_device(self, args):
        try:
            return _map_tensors(args, lambda t: t.to(self.device))
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", _raised(e, "moving get_inputs() to %s" % self.device), _trace(e))

    def inputs(self, seed):
        """get_inputs() after seeding with `seed`, tensors moved to the device."""
        return self.to_device(self.host_inputs(seed))

    def trial_inputs(self, i):
        """get_inputs() of trial i (seed + 1 + i), made here or, in a defended evaluation, by the
        other process (self.shared). Those of the first `input_sets` trials (every trial, in a
        defended evaluation) are made once and kept: they are also timing's base sets. Callers
        never modify them (they clone)."""
        if i in self.kept_inputs:
            return self.kept_inputs[i]
        args = self.shared.take(i, self) if self.shared is not None else None
        if args is None:
            args = self.inputs(self.req["seed"] + 1 + i)
        if i < self.req["timing"]["input_sets"] or self.shared is not None:
            self.kept_inputs[i] = args
        return args

    def timing_sets(self):
        """The request's `input_sets` base input sets for timing: the inputs of trials 0, 1, ...
        (seeds seed + 1 + j)."""
        return [self.trial_inputs(j) for j in range(self.req["timing"]["input_sets"])]

    def call_inputs(self, k):
        """Fresh inputs for timed call k: base set k % input_sets with every tensor of more than
        one element rolled (flattened, circularly shifted) by an offset that depends on k, into new
        memory. The values stay those the task draws (a permutation of them), but no two calls see
        the same contents, so an output cached from an earlier call is wrong for this one. Judge
        and candidate compute the same inputs."""
        import torch

        base = self.timing_sets()[k % len(self.timing_sets())]
        index = [0]

        def roll(t):
            index[0] += 1
            n = t.numel()
            if n < 2:
                return t.clone()
            shift = (1 + (k * 2654435761 + index[0] * 40503 + self.req["seed"]) % (n - 1))
            return torch.roll(t.reshape(-1), shift).reshape(t.shape)

        return _map_tensors(base, roll)

    def visible_paths(self):
        """What the candidate's process must still see once confined (anvil.sandbox mounts no
        private tmpfs over a directory holding one): the candidate, the task, and every place
        Python, torch and anvil load modules and libraries from (lazy imports happen later)."""
        paths = [self.req["candidate_dir"], self.req["task_file"], os.path.dirname(os.path.dirname(__file__)),
                 sys.prefix, sys.base_prefix, os.environ.get("ANVIL_CACHE", "")]
        paths += [p for p in sys.path if p]
        return [os.path.abspath(p) for p in paths if p]

    def call_reference(self, pristine, where):
        self.pin_flags()
        args = _map_tensors(pristine, lambda t: t.clone())
        try:
            with self.torch.no_grad():
                out = self.ref(*args)
            self.sync()
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", "%s: %s" % (where, _raised(e, "the reference Model")), _trace(e))
        return out

    def call_candidate(self, pristine, where):
        """The candidate's output on clones of `pristine`, after checking it left them untouched."""
        args = _map_tensors(pristine, lambda t: t.clone())
        try:
            with self.torch.no_grad():
                out = self.new(*args)
            self.sync()
        except BaseException as e:  # noqa: BLE001 - the candidate's failure is the answer
            raise Outcome("runtime_error", "%s: %s" % (where, _raised(e, "the candidate")), _trace(e))
        for name, before, after in _tensor_pairs(pristine, args, "input"):
            if not isinstance(after, self.torch.Tensor):
                continue
            changed = compare.changed_elements(before, after)
            if changed:
                raise _Mismatch("%s: the candidate modified %s (%d of %d elements changed)"
                                % (where, name, changed, before.numel()))
        return out

    # -- verification -----------------------------------------------------------------------
    def check_reference(self, pristine, seed):
        where = "reference check (seed %d)" % seed
        first = self.call_reference(pristine, where)
        bad = compare.nonfinite(first)
        if bad:
            raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        second = self.call_reference(pristine, where)
        lines = compare.compare(second, first, self.req["tolerance"])
        if lines:
            raise Outcome("task_error", "the reference is non-deterministic: two runs on the inputs of "
                          "seed %d differ: %s" % (seed, "\n".join(lines)))
        return first, second

    def verify(self):
        self.stage = "verify"
        verify = self.report["verify"]
        seed0 = self.req["seed"] + 1
        pristine = self.trial_inputs(0)
        # Keep the reference check's outputs alive through trial 0, so that a candidate returning
        # uninitialized memory cannot be handed the freed buffer of a correct answer.
        keep = self.check_reference(pristine, seed0)
        failures = []
        for i in range(self.req["trials"]):
            seed = seed0 + i
            if i > 0:
                keep = None
                pristine = self.trial_inputs(i)
            entry = {"seed": seed, "ok": True, "report": ""}
            verify["trials"].append(entry)
            try:
                self.trial(i, seed, pristine)
            except _Mismatch as m:
                entry.update(ok=False, report=str(m))
                failures.append(str(m))
            except Outcome as o:
                entry.update(ok=False, report=o.message)
                verify["failed"] += 1
                if o.outcome == "runtime_error" and failures:
                    raise Outcome("wrong_answer", failures[0], "\n".join(failures))
                raise
            verify["passed" if entry["ok"] else "failed"] += 1
        del keep
        if failures:
            detail = "\n".join(failures)
            raise Outcome("wrong_answer", failures[0], tail(detail, DETAIL_LINES))

    def trial(self, i, seed, pristine):
        prefix = "trial %d (seed %d)" % (i, seed)
        first = self.call_candidate(pristine, prefix)
        # A snapshot: a later call may legitimately reuse (and overwrite) the returned buffers.
        first = _map_tensors(first, lambda t: t.detach().clone())
        expected = self.call_reference(pristine, prefix)
        bad = compare.nonfinite(expected)
        if bad:
            raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        second = self.call_candidate(pristine, prefix + ", second call (after the reference)")
        tol = self.req["tolerance"]
        for label, got in ((prefix, first), (prefix + ", second call (after the reference)", second)):
            lines = compare.compare(got, expected, tol)
            if lines:
                raise _Mismatch("%s, %s" % (label, "\n".join(lines)))

    # -- timing -----------------------------------------------------------------------------
    def time_models(self):
        t = self.req["timing"]
        if not t["measure"]:
            return
        self.stage = "timing"
        sets = self.timing_sets()
        results = self.report["timing"]
        for name in t["measure"]:
            if name == "compile":
                results["compile"] = self.time_compile(sets)
                continue
            model = self.new if name == "candidate" else self.ref
            try:
                results[name] = self.time_one(model, sets, t["warmup"])
            except BaseException as e:  # noqa: BLE001
                if name == "candidate":
                    raise Outcome("runtime_error", "while timing: %s" % _raised(e, "the candidate"), _trace(e))
                raise Outcome("task_error", "while timing: %s" % _raised(e, "the reference Model"), _trace(e))

    def time_one(self, fn, sets, warmup):
        t = self.req["timing"]
        self.pin_flags()
        with self.torch.no_grad():
            return timing.measure(fn, sets, self.device, warmup=warmup, calls=t["calls"],
                                  flush_l2=bool(t["flush_l2"]), kernel_sum=bool(t["kernel_sum"]),
                                  hide_launch=bool(t.get("hide_launch", True)))

    def time_compile(self, sets):
        """torch.compile(ref) timed like the others, compiled during warm-up; {"error"} if it fails."""
        mode = self.req["timing"]["compile_mode"]
        try:
            import torch._dynamo

            torch._dynamo.reset()
            compiled = self.torch.compile(self.ref) if mode == "default" else self.torch.compile(self.ref, mode=mode)
            return self.time_one(compiled, sets, max(1, self.req["timing"]["warmup"]))
        except BaseException as e:  # noqa: BLE001 - a baseline that does not compile is reported
            if isinstance(e, KeyboardInterrupt):
                raise
            return {"error": _raised(e, "torch.compile(Model%s)" % ("" if mode == "default" else ", mode=%r" % mode))}

    # -- all of it --------------------------------------------------------------------------
    def run(self, started):
        seconds = self.report["seconds"]
        self.setup()
        self.load_task()
        self.build_reference()
        self.import_candidate()
        self.build_candidate()
        seconds["import"] = time.perf_counter() - started
        mark = time.perf_counter()
        try:
            self.verify()
        finally:
            seconds["verify"] = time.perf_counter() - mark
        mark = time.perf_counter()
        try:
            self.time_models()
        finally:
            seconds["timing"] = time.perf_counter() - mark


class _Mismatch(Exception):
    """A wrong answer in one trial (the trials go on; the first report becomes the message)."""


# Unexpected failures of the runner itself, by the stage they happened in.
_STAGE_OUTCOME = {"task": "task_error", "load": "load_error", "verify": "runtime_error",
                  "timing": "runtime_error"}


def evaluate(request_text, report, started):
    """Run the evaluation of `request_text` into `report`; return the exit status."""
    evaluation = None
    try:
        request = parse_request(request_text)
        if request["defenses"]["enabled"]:
            from anvil.judge import Judge

            evaluation = Judge(request, report)
        else:
            evaluation = Evaluation(request, report)
        evaluation.run(started)
    except RequestError as e:
        report.update(status="error", message="bad request: %s" % e)
        return 2
    except Outcome as o:
        report.update(outcome=o.outcome, message=o.message, detail=o.detail, reason=o.reason)
    except BaseException as e:  # noqa: BLE001 - a report even when the runner itself breaks
        stage = evaluation.stage if evaluation is not None else "setup"
        if stage not in _STAGE_OUTCOME:
            report.update(status="error", message="the runner failed during %s: %s" % (stage, _what(e)),
                          detail=_trace(e))
            return 2
        report.update(outcome=_STAGE_OUTCOME[stage], message="the runner failed during %s: %s" % (stage, _what(e)),
                      detail=_trace(e))
    return 0


def main():
    started = time.perf_counter()
    timing.Clock.origin = started
    channel = ReportChannel()
    report = new_report()
    code = 2
    try:
        code = evaluate(sys.stdin.read(), report, started)
    except BaseException as e:  # noqa: BLE001 - reading stdin failed, or worse
        report.update(status="error", message="the runner failed: %s" % _what(e))
    finally:
        report["seconds"]["main"] = time.perf_counter() - started
        for key in report["seconds"]:
            report["seconds"][key] = round(report["seconds"][key], 3)
        channel.send(report)
    return code


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy, so that anvil.judge and anvil.candidate
    # see the same classes (Outcome) as the code that catches them.
    from anvil import runner as _runner

    status = _runner.main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    # Skip interpreter teardown: candidate threads, atexit hooks and a broken CUDA context must
    # not change the exit status or hang the runner after the report is out.
    os._exit(status)
