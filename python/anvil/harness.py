"""What the runner, the judge and the candidate's process share: the outcome type, walkers over
values, exception messages, and the Harness: one task's models and inputs on one device.

Nothing here decides an outcome beyond naming whose fault a failure is (the task's: task_error;
the candidate's import or constructor: load_error). runner.py (the undefended evaluation),
judge.py and candidate.py build on it; it imports none of them.
"""
import contextlib
import hashlib
import importlib.util
import inspect
import numbers
import os
import random
import re
import sys
import time
import traceback

from anvil._cli import one_line, tail

PROTOCOL = "anvil.runner/1"
DETAIL_LINES = 30
DETAIL_CHARS = 8000
MESSAGE_CHARS = 500
OUTCOMES = ("task_error", "load_error", "runtime_error", "wrong_answer", "hack_suspected")
# A defended evaluation whose one set of inputs takes at least this much is lean
# (Harness.plan_inputs): every trial's inputs drawn on the device when used, never kept or copied.
LEAN_BYTES = 1 << 30
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_MODULE_CALL_FILE = os.path.join("torch", "nn", "modules", "module.py")


class RequestError(Exception):
    """The request is malformed or cannot be served here (status "error")."""


SEEDED_HINT = ("\n(ModelNew kept the weights its constructor made, its parameters differing from Model's in name or "
               "shape: they match Model's only if ModelNew makes the same parameters, in the same order, with the same "
               "initialisation)")


class CannotServe(RequestError):
    """This machine cannot evaluate safely (the candidate's process cannot be confined, ...).
    memory_limited: the GPU ran out of memory for anvil's own work (memory_fault), the candidate's
    process holding no more than its share; the report says so, and anvil runs an evaluation
    prepared beside others again alone."""

    def __init__(self, message, memory_limited=False):
        super().__init__(message)
        self.memory_limited = memory_limited


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
# Exceptions as messages

def what(exc):
    message = one_line(str(exc), MESSAGE_CHARS)
    return "%s: %s" % (type(exc).__name__, message) if message else type(exc).__name__


def _is_ours(filename):
    return os.path.dirname(os.path.abspath(filename)) == _PACKAGE_DIR or filename.endswith(_MODULE_CALL_FILE)


def trace(exc):
    """The traceback of `exc` without the frames of anvil and nn.Module.__call__ around the
    candidate's (those that led to it, and those below its last line: load_inline's own, whose
    error is the compiler's diagnostics), at most DETAIL_LINES lines."""
    tb = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is None:
        tb = exc.__traceback__
    te = traceback.TracebackException(type(exc), exc, tb)
    while len(te.stack) > 1 and _is_ours(te.stack[-1].filename):
        te.stack.pop()
    text = tail("".join(te.format()), DETAIL_LINES)
    return text if len(text) <= DETAIL_CHARS else "..." + text[-DETAIL_CHARS:]


def raised(exc, who):
    """The message for an exception raised by `who` (exit() is named as such)."""
    if isinstance(exc, SystemExit):
        return "%s called exit()%s" % (who, "" if exc.code is None else " (status %r)" % (exc.code,))
    return "%s raised %s" % (who, what(exc))


# ---------------------------------------------------------------------------------------------
# Values

def map_tensors(value, fn, depth=0):
    """`value` with fn applied to every tensor inside lists, tuples and dicts; others unchanged."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if depth < 32 and isinstance(value, (list, tuple)):
        items = [map_tensors(v, fn, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if depth < 32 and isinstance(value, dict):
        return {k: map_tensors(v, fn, depth + 1) for k, v in value.items()}
    return value


def tensor_pairs(a, b, where, depth=0):
    """(name, tensor of a, the value at the same place of b) for every tensor of `a`."""
    import torch

    if isinstance(a, torch.Tensor):
        yield where, a, b
    elif depth < 32 and isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from tensor_pairs(x, y, "%s.%d" % (where, i) if depth else "%s %d" % (where, i), depth + 1)
    elif depth < 32 and isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k in b:
                yield from tensor_pairs(a[k], b[k], "%s[%r]" % (where, k), depth + 1)


def leaves(value, where="output", depth=0):
    """(name, leaf) for every leaf of a value (lists, tuples and dicts walked)."""
    if depth < 32 and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from leaves(v, "%s %d" % (where, i) if not depth else "%s.%d" % (where, i), depth + 1)
    elif depth < 32 and isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, "%s[%r]" % (where, k), depth + 1)
    else:
        yield where, value


def tensor_bytes(value):
    import torch

    return sum(t.numel() * t.element_size() for _n, t in leaves(value) if isinstance(t, torch.Tensor))


ALLOCATION_FAILURES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                       "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE", "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY")


def memory_error(e, torch):
    """The exception of `e`'s chain (itself, its cause or context) that says the GPU ran out of
    memory (torch's OutOfMemoryError, or a library's allocation failure), else None."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, torch.OutOfMemoryError) or (
                isinstance(e, RuntimeError) and any(word in str(e) for word in ALLOCATION_FAILURES)):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def candidate_failed(doing, e, torch, who="the candidate"):
    """The Outcome of the candidate's own failure `e` while `doing`: runtime_error, with reason
    gpu_memory when what ran out was the GPU's memory (memory_error), so a model sees which."""
    return Outcome("runtime_error", "%s: %s" % (doing, raised(e, who)), trace(e),
                   reason="gpu_memory" if memory_error(e, torch) is not None else None)


def trial_digest(args, depth=0, memo=None):
    """One trial's inputs as comparable values: each tensor's dtype, shape and 64-bit digest
    (output_compare.digest: the same for the same contents on the same device), every other value's repr.
    The judge and the candidate's process compare theirs (SharedInputs.settle_draws). `memo`, where
    given, keeps each tensor's digest by id() for a caller that digests the same tensors again
    before anything can change them (a lean call's inputs: gigabytes read once, not twice)."""
    import torch

    from anvil import output_compare

    if isinstance(args, torch.Tensor):
        try:
            value = output_compare.digest(args)
            if memo is not None:
                memo[id(args)] = value
            return [str(args.dtype), list(args.shape), value]
        except Exception:  # noqa: BLE001 - no digest (a sparse tensor): never equal, the judge's copy is used
            return ["undigested", os.urandom(8).hex()]
    if depth < 32 and isinstance(args, (list, tuple)):
        return [trial_digest(a, depth + 1, memo) for a in args]
    if depth < 32 and isinstance(args, dict):
        return [[str(k), trial_digest(args[k], depth + 1, memo)] for k in sorted(args, key=str)]
    try:
        return hashlib.sha256(repr(args).encode("utf-8", "replace")).hexdigest()
    except Exception:  # noqa: BLE001 - a repr that raises
        return ["undigested", os.urandom(8).hex()]


def meta_input_bytes(get_inputs, seed_all, seed, limit_s=120.0):
    """The bytes of one set of get_inputs()'s tensors, drawn with torch's meta device as default
    (shapes without memory), in a forked child: whatever the task's get_inputs() does there (a
    cache of its inputs, now meta tensors; an explicit device='cuda' that starts CUDA) stays in the
    child. None when it cannot tell (a task that needs real tensors, fails, hangs past limit_s or
    dies). Both processes of an evaluation, and vet, size a task so."""
    import select
    import signal

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one line back, then gone without Python's teardown
        code = 0
        try:
            os.close(read_end)
            import torch

            seed_all(seed)
            with torch.device("meta"):
                args = get_inputs()
            if isinstance(args, (list, tuple)):
                os.write(write_end, b"%d\n" % tensor_bytes(list(args)))
        except BaseException:  # noqa: BLE001 - no size: the caller draws and sees
            code = 1
        os._exit(code)
    os.close(write_end)
    data, deadline = b"", time.monotonic() + limit_s
    try:
        while True:
            ready, _w, _x = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(read_end, 64) if ready else b""
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_end)
        if not data.endswith(b"\n"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    try:
        return int(data) if data.endswith(b"\n") else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Models

def signature(cls):
    try:
        return inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None


def constructor_difference(model, new, init, protocol):
    """Why ModelNew's constructor cannot be called as the protocol calls it, or None. Both protocols
    build ModelNew(*get_init_inputs()), as KernelBench's and CUDA-Agent's harnesses do: those values
    must bind to its parameters (more parameters, with defaults, are fine). cuda-agent also wants
    Model's parameters first, in order and by name (CUDA-Agent's rule: ModelNew takes Model's
    arguments and weights); kernelbench asks nothing more (docs/protocols.md). A constructor of
    nn.Module's own ((self, *args, **kwargs), see takes_anything) is called and judged."""
    import inspect as _inspect

    new_sig, ref_sig = signature(new), signature(model)
    if new_sig is None:
        return None
    try:
        new_sig.bind(None, *init)
    except TypeError as e:
        return ("ModelNew.__init__%s cannot be called with get_init_inputs() (%d value%s), as ModelNew(*get_init_inputs()) "
                "is: %s" % (new_sig, len(init), "" if len(init) == 1 else "s", e))
    if protocol != "cuda-agent" or ref_sig is None or takes_anything(new_sig) or takes_anything(ref_sig):
        return None
    ref_params = list(ref_sig.parameters.values())[1:]
    new_params = list(new_sig.parameters.values())[1:]
    for i, p in enumerate(ref_params):
        if p.kind in (_inspect.Parameter.VAR_POSITIONAL, _inspect.Parameter.VAR_KEYWORD):
            break
        if i >= len(new_params) or new_params[i].name != p.name:
            return ("ModelNew.__init__%s differs from Model.__init__%s: it must take Model's parameters first, in "
                    "order and by name (more, with defaults, may follow)" % (new_sig, ref_sig))
    return None


def takes_anything(sig):
    """(self, *args, **kwargs): nn.Module's own constructor, which a ModelNew without one of its own
    inherits (KernelBench's candidates for a Model whose constructor takes nothing often have none),
    or a catch-all; it is called as Model's is, and whatever it cannot take fails there. The same of a
    Model without a constructor of its own: a ModelNew with one (to set its launch configuration,
    say: `def __init__(self)`) is called with get_init_inputs() as Model is, and judged."""
    kinds = [p.kind for p in list(sig.parameters.values())[1:]]
    return kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def state_dict_difference(expected, got):
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


# ---------------------------------------------------------------------------------------------
# The machine

def driver_version():
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
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


def cpu_name():
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
# One task on one device

class Harness:
    """The task's models and inputs for one request. `env` receives the environment facts (torch,
    CUDA, device name, driver) once the device is set up."""

    def __init__(self, request, env=None):
        self.req = request
        self.env = env if env is not None else {}
        self.stage = "setup"
        self.torch = None
        self.device = None
        self.kept_inputs = {}  # trial -> inputs (timing's base sets, or every trial when shared)
        # The trials' seeds: trial i's is trial_base + i, the request's seed + 1 unless the judge drew
        # the base in secret (a defended evaluation: Judge.set_up, sent in its plan); None once the
        # candidate's process has drawn what it needs (seeds_gone: they are not its to know)
        self.trial_base = None
        self.seeds_gone = False
        self.shared = None  # a channel.SharedInputs: half the trials come from the other process
        self.device_inputs = None  # whether get_inputs() may run with the device as default (batches)
        self.draws_each = False  # every trial drawn by each process itself (plan_inputs)
        self.input_bytes = None  # one set of get_inputs()'s tensors, in bytes (plan_inputs)
        self.lean = False  # a large task: inputs drawn when used, never kept (plan_inputs)
        self.weights_note = None  # how ModelNew got its weights, when not by name (build_candidate)

    # -- device -----------------------------------------------------------------------------
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
        else:
            # One intra-op thread on the CPU, for the reference and the candidate's torch alike: at
            # OpenMP's barriers a shared machine's load stretches a parallel op by a scheduler slice
            # (on a 2-core machine eager's calls of 0.14 ms took up to 37 ms with two threads, at
            # most 1.05 ms with one: bench/results/cpu-load-2026-11-24*.json), and no time taken
            # there would mean anything.
            torch.set_num_threads(1)
        env = self.env
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if self.device.type == "cuda":
            env["device_name"] = torch.cuda.get_device_name(self.device)
            env["capability"] = "%d.%d" % torch.cuda.get_device_capability(self.device)
            env["driver"] = driver_version()
        else:
            env["device_name"] = cpu_name()
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

    def free_cached(self):
        """Hand the device memory torch's allocator keeps cached back to the device (for the other
        process of a defended evaluation)."""
        if self.device is not None and self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    def seed_all(self, seed):
        self.torch.manual_seed(seed)
        random.seed(seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(seed % (1 << 32))

    # -- the task ---------------------------------------------------------------------------
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

    def call_list(self, name):
        path = self.req["task_file"]
        try:
            result = getattr(self.task, name)()
        except BaseException as e:  # noqa: BLE001 - the task's failure is the answer
            raise Outcome("task_error", raised(e, "%s: %s()" % (path, name)), trace(e))
        if not isinstance(result, (list, tuple)):
            raise Outcome("task_error", "%s: %s() returned %s, expected a list or tuple"
                          % (path, name, type(result).__name__))
        return list(result)

    def init_inputs(self):
        self.seed_all(self.req["seed"])
        return self.call_list("get_init_inputs")

    def build_reference(self):
        """Model(*get_init_inputs()) after the seed, in eval mode, on the device."""
        self.construct_reference()
        self.place_reference()

    def construct_reference(self):
        """build_reference's host part (the constructor, the weights' initialisation: seconds for a
        wide layer), which needs no device: before CUDA starts when a GPU lock is awaited
        (Judge.set_up)."""
        self.init = self.init_inputs()
        self.seed_all(self.req["seed"])
        try:
            self.ref = self.Model(*map_tensors(self.init, lambda t: t.clone())).eval()
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", raised(e, "Model(*get_init_inputs())"), trace(e))

    def place_reference(self):
        try:
            self.ref = self.ref.to(self.device)
        except BaseException as e:  # noqa: BLE001
            raise Outcome("task_error", raised(e, "Model(*get_init_inputs()).to(%s)" % self.device), trace(e))

    # -- inputs -----------------------------------------------------------------------------
    def host_inputs(self, seed):
        """get_inputs() after seeding with `seed`, as the task makes them (usually on the host)."""
        self.seed_all(seed)
        return self.call_list("get_inputs")

    def to_device(self, args):
        try:
            return map_tensors(args, lambda t: t.to(self.device))
        except BaseException as e:  # noqa: BLE001
            self.out_of_memory(e, "moving the task's inputs to it")
            raise Outcome("task_error", raised(e, "moving get_inputs() to %s" % self.device), trace(e))

    def inputs(self, seed):
        """get_inputs() after seeding with `seed`, tensors moved to the device."""
        return self.to_device(self.host_inputs(seed))

    def fresh_inputs(self, seed, count):
        """`count` calls' get_inputs(), drawn one after another after seeding once with `seed`, made
        with the device as torch's default device where the task allows it (its tensors are then
        drawn on the GPU: fast for large inputs), else on the host; tensors on the device.
        Deterministic for a seed where get_inputs() has no state of its own. For the judge's batches,
        whose seeds are secret, and the trials (draws_each: each process draws them, the judge checks
        they agree; lean: a task that cannot draw on the device fails alike in both and both draw on
        the host; running out of memory is no such failure, but anvil's limit, raised as
        CannotServe)."""
        if self.device.type == "cuda" and self.device_inputs is not False:
            try:
                self.seed_all(seed)
                with self.torch.device(self.device):
                    calls = [self.call_list("get_inputs") for _ in range(count)]
                self.device_inputs = True
                return [self.to_device(args) for args in calls]
            except BaseException as e:  # noqa: BLE001 - the task needs the host: draw there from now on
                self.out_of_memory(e, "drawing the task's inputs")
                if isinstance(e, Outcome) and self.device_inputs:  # it drew on the device before: the task's own failure
                    raise
                self.device_inputs = False
        self.seed_all(seed)
        return [self.to_device(self.call_list("get_inputs")) for _ in range(count)]

    def out_of_memory(self, e, doing):
        """When `e` is the GPU running out of memory (memory_error), the memory fault of `doing`
        (memory_fault: CannotServe here); else nothing."""
        found = memory_error(e, self.torch)
        if found is not None:
            self.memory_fault(doing, found)

    def memory_fault(self, doing, e):
        """The GPU ran out of memory while this process was `doing` its own work: anvil's limit
        (CannotServe). The judge decides otherwise when the candidate's process held the memory."""
        raise CannotServe("the GPU ran out of memory %s (%s): the task's inputs and anvil's copies of them do not fit "
                          "here" % (doing, one_line(str(e))[:200]), memory_limited=True)

    def plan_inputs(self):
        """How large one set of inputs is (get_inputs() run with torch's meta device as default:
        shapes without memory; None when the task's get_inputs() cannot run so), and whether this
        (defended) evaluation is lean: one set takes the request's timing.lean_bytes (LEAN_BYTES
        unless it says otherwise) or more. A lean evaluation never keeps or copies a set of inputs: each use draws
        its own on the device (fresh_inputs: deterministic for a seed, milliseconds for gigabytes),
        so the judge's and the candidate's processes together hold about two sets and two outputs
        at most (docs/runner-protocol.md, "Large tasks"). Decided by the judge from the task alone,
        before CUDA starts; the candidate's process adopts its plan (adopt_plan)."""
        self.input_bytes = meta_input_bytes(getattr(self.task, "get_inputs"), self.seed_all, self.req["seed"] + 1)
        self.lean = self.input_bytes is not None and self.input_bytes >= self.req["timing"].get("lean_bytes", LEAN_BYTES)
        # How the trials are drawn (timing.draws; default "each" on a GPU, "split" on the CPU): "each":
        # every process draws every trial itself, in order, with the device as default (fresh_inputs:
        # milliseconds where the host takes a second a gigabyte), and the judge checks by digest that
        # the candidate's process drew what it did (channel.SharedInputs.settle_draws: a get_inputs()
        # with state of its own that its seed does not reset gets the judge's copy instead); "split":
        # the task's own host draws, half in each process. A task whose get_inputs() cannot run on the
        # meta device is split. The candidate's process adopts the judge's plan (adopt_plan).
        cuda = self.req["device"].startswith("cuda")
        self.draws_each = not self.lean and self.input_bytes is not None and \
            self.req["timing"].get("draws", "each" if cuda else "split") == "each"
        return self.lean

    def drawn_sets(self):
        """The trials' inputs drawn ahead by each process (draws_each): every trial's and every
        timing base set's (input_sets may exceed trials), so that all of them are checked alike."""
        return max(self.req["trials"], self.req["timing"]["input_sets"])

    def plan(self):
        """What plan_inputs decided, for the candidate's process (SharedInputs.send_plan), with the
        trials' seed base where the judge drew one."""
        return {"input_bytes": self.input_bytes, "lean": self.lean, "draws_each": self.draws_each,
                "trial_base": self.trial_base}

    def adopt_plan(self, plan):
        """The judge's plan (both processes must draw alike); without one (the judge went away), this
        process's own."""
        if not isinstance(plan, dict) or not isinstance(plan.get("lean"), bool) or \
                not isinstance(plan.get("draws_each"), bool):
            return self.plan_inputs()
        size = plan.get("input_bytes")
        self.input_bytes = size if isinstance(size, int) and not isinstance(size, bool) else None
        self.lean, self.draws_each = plan["lean"], plan["draws_each"]
        base = plan.get("trial_base")
        self.trial_base = base if isinstance(base, int) and not isinstance(base, bool) else None
        return self.lean

    def trial_seed(self, i):
        """Trial i's seed: trial_base + i (the request's seed + 1 + i without a base of the judge's)."""
        if self.seeds_gone:
            raise RuntimeError("anvil: the trials' seeds are gone from this process (every set it needs was drawn)")
        return (self.req["seed"] + 1 if self.trial_base is None else self.trial_base) + i

    def forget_seeds(self):
        """The candidate's process, once every set it will use is drawn (not lean): the trials' seed
        base gone, and torch's, Python's and numpy's generators seeded again from the request's seed
        (the weights'), so that nothing here tells which set came from which seed."""
        self.trial_base = None
        self.seeds_gone = True
        self.seed_all(self.req["seed"])

    def trial_inputs(self, i):
        """get_inputs() of trial i (trial_seed(i)): drawn here (draws_each: on the device where the
        task allows it), or made on the host here or, in a defended evaluation, by the other process
        (self.shared). Those of the first `input_sets` trials (every trial, in a defended
        evaluation) are made once and kept: they are also timing's base sets. Callers never modify
        them (they clone). Lean: drawn on the device for each use, never kept (the caller owns
        them)."""
        if self.lean:
            return self.fresh_inputs(self.trial_seed(i), 1)[0]
        if i in self.kept_inputs:
            return self.kept_inputs[i]
        if self.draws_each:
            args = self.fresh_inputs(self.trial_seed(i), 1)[0]
        else:
            args = self.shared.take(i, self) if self.shared is not None else None
        if args is None:
            args = self.inputs(self.trial_seed(i))
        if i < self.req["timing"]["input_sets"] or self.shared is not None:
            self.kept_inputs[i] = args
        return args

    def forget_trials(self, keep=None):
        """Drop the trials' inputs that timing does not use (the first `input_sets` are its base
        sets; with keep=0, every one): a large task's copies in two processes must not crowd the
        GPU."""
        keep = range(self.req["timing"]["input_sets"] if keep is None else keep)
        for i in [i for i in self.kept_inputs if i not in keep]:
            del self.kept_inputs[i]
        self.free_cached()

    def timing_sets(self):
        """The request's `input_sets` base input sets for timing: the inputs of trials 0, 1, ...
        Lean: one, trial 0's, drawn once and kept until forget_trials(0)."""
        if self.lean:
            if 0 not in self.kept_inputs:
                self.kept_inputs[0] = self.trial_inputs(0)
            return [self.kept_inputs[0]]
        return [self.trial_inputs(j) for j in range(self.req["timing"]["input_sets"])]

    def call_inputs(self, k):
        """Timed call k's inputs: a copy (new memory) of base set k % input_sets, the inputs of a
        trial, as the task's get_inputs() drew them: every input a candidate is timed on is one the
        task could have made (a derived one, shifted or permuted, would lose the structure a task
        promises and an honest kernel may use: a triangular or symmetric matrix). Judge and
        candidate compute the same inputs; consecutive calls see different buffers and contents,
        and the judge's own clock (anvil.batch) times fresh secret draws, whatever a candidate does
        with the rotation. Lean: the base set itself, every call (no room for a copy)."""
        sets = self.timing_sets()
        base = sets[k % len(sets)]
        if self.lean:
            return base
        return map_tensors(base, lambda t: t.clone())

    # -- the candidate ----------------------------------------------------------------------
    @contextlib.contextmanager
    def candidate_path(self):
        """The candidate's directory on sys.path, last (never ahead of anvil's or torch's modules),
        and the working directory, while its code is imported."""
        directory = os.path.abspath(self.req["candidate_dir"])
        sys.path.append(directory)
        os.chdir(directory)
        yield directory

    def import_candidate(self):
        self.stage = "load"
        with self.candidate_path() as directory:
            path = os.path.join(directory, "model_new.py")
            if not os.path.isfile(path):
                raise Outcome("load_error", "no model_new.py in the candidate directory")
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
                raise Outcome("load_error", raised(e, "importing model_new.py"), trace(e))
        cls = getattr(module, "ModelNew", None)
        if not (isinstance(cls, type) and issubclass(cls, self.torch.nn.Module)):
            raise Outcome("load_error", "model_new.py defines no class `ModelNew` (a torch.nn.Module subclass)")
        why = constructor_difference(self.Model, cls, self.init_inputs(), self.req["rules"]["name"])
        if why:
            raise Outcome("load_error", why)
        self.ModelNew = cls

    def set_config(self, new, config):
        """The launch configuration the request names (the agent's tune tool) in place of the one
        ModelNew set itself: its integer attribute `config`, which forward passes to the launchers."""
        try:
            own = getattr(new, "config", None)
        except BaseException as e:  # noqa: BLE001 - the candidate's own attribute raised
            raise Outcome("load_error", raised(e, "ModelNew.config"), trace(e))
        if isinstance(own, bool) or not isinstance(own, numbers.Integral):
            raise Outcome("load_error", "tune needs ModelNew.__init__ to set an integer self.config (the launch "
                          "configuration forward passes to your launchers); it has %s" % (
                              "none" if own is None else "a %s" % type(own).__name__))
        try:
            new.config = config
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", raised(e, "setting ModelNew.config = %d" % config), trace(e))

    def build_candidate(self, weights):
        """ModelNew(*get_init_inputs()) with `weights` (Model's state_dict) loaded strictly."""
        init = self.init_inputs()
        self.seed_all(self.req["seed"])
        try:
            new = self.ModelNew(*map_tensors(init, lambda t: t.clone()))
            if not isinstance(new, self.torch.nn.Module):
                raise TypeError("ModelNew(...) is not a torch.nn.Module")
            new = new.eval().to(self.device)
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", raised(e, "ModelNew(*get_init_inputs())"), trace(e))
        if self.req.get("config") is not None:
            self.set_config(new, self.req["config"])
        try:
            got = new.state_dict()
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", raised(e, "ModelNew.state_dict()"), trace(e))
        difference = state_dict_difference(weights, got)
        if difference and self.req["rules"]["weights"] == "by_name_or_seed":
            # KernelBench's rule (rules.weights by_name_or_seed): both models were built after the
            # same seed, so ModelNew's own weights match Model's when it makes the same parameters
            # in the same order, whatever their names; the outputs decide.
            self.weights_note = "seeded: %s" % difference.splitlines()[0][:300]
            self.new = new
            return
        if difference:
            raise Outcome("load_error", difference)
        try:
            new.load_state_dict(weights, strict=True)
        except BaseException as e:  # noqa: BLE001
            raise Outcome("load_error", raised(e, "ModelNew.load_state_dict(Model's state_dict, strict=True)"),
                          trace(e))
        self.new = new
