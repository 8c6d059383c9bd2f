"""python -m anvil.vet: flag tasks whose verification a degenerate candidate would pass (anvil.vet/1).

A task is degenerate when a candidate that computes nothing passes its check: the reference output
is all zero, too small for the tolerance to see, constant, a copy of an input, or the same whatever
the input (docs/vet.md). `anvil vet` writes one JSON request on stdin:

    {"task_file": PATH, "device": "cpu"|"cuda", "seed": 0, "tolerance": {"preset": "strict",
     "float32": {"atol", "rtol", "norm"}, ...}, "gpu_lock": PATH, "gpu_lock_shared": true}
                                (tolerance: share.tolerance()'s shape; default strict)

gpu_lock (optional): the GPU's lock file (timing.GpuLock), taken before CUDA starts and held to the
end: shared (gpu_lock_shared, the default) beside other vettings and warm-ups, exclusive for a
vetting alone; no measurement times while a vetting runs. The report's lock_wait_s says how long
it waited.

and reads one JSON report, on fd 3 when it is open, else the last line of stdout (whatever the task
prints goes to stderr):

    {"protocol": "anvil.vet/1", "status": "done"|"error", "message": "", "detail": "",
     "flags": [{"flag", "detail", "distributions": [...]}], "notes": [same shape],
     "outputs": [{"name", "shape", "dtype", "max_abs", "std"}],
     "distributions": [{"name", "input_sets", "skipped", "nonfinite"}], "seeds": [s1, s2]}

The task is loaded as the runner loads it (torch.manual_seed(seed) before get_init_inputs() and
before Model(...); .eval().to(device); get_inputs() after torch.manual_seed(s); no_grad) and run on
input sets from four distributions, float tensors changed and integer/bool ones left as given:

    task     get_inputs() as given, seeds seed+1 and seed+2 (the runner's first two trials)
    signed   the task's inputs times random +-1 signs
    scaled   the task's inputs times 1e3, and times 1e-3 (four sets, paired by scale)
    heavy    Student-t samples with 2 degrees of freedom, of the inputs' shapes and dtypes

A property holds under a distribution when it holds on every input set of it (for
input_independent: on every pair of sets of different seeds), i.e. when a candidate exploiting it
would pass every trial drawn from that distribution:

    zero_output        every output element is exactly 0
    tiny_output        max |output| < 10 * atol of the output's dtype (float outputs)
    constant_output    an output of more than one element equals its mean within tolerance; or
                       (task inputs only, scalars included) one number, the mean of an output
                       over the trials' input sets, passes every trial (seeds seed+1..seed+5)
    equals_input       an output equals an input of the same shape and dtype within tolerance
    input_independent  the outputs of two input sets are equal within tolerance (a replayed
                       output passes)

"Within tolerance" is the runner's rule: |got - expected| <= atol + rtol * |expected| for every
element and, when the tolerance has a norm, ||got - expected|| / ||expected|| <= norm; dtypes with
no tolerance entry compare exactly. A property that holds under "task" is a FLAG listing every
distribution where it holds; one that holds only under the others is a NOTE. Under one
distribution, a property implied by a stronger one is not listed: zero_output implies the other
three value properties, and tiny_output explains constant_output and input_independent.

A task that cannot be loaded or run on its own inputs gives status "error" with a one-line message
naming the cause (detail: the traceback); a distribution whose inputs make the reference raise is
skipped (its reason in "distributions"). Exit status 0 with status "done", 2 with "error".
"""
import inspect
import json
import math
import random
import sys
import time
import traceback

from anvil import share, stress
from anvil._cli import answer_one, exit_after, one_line, quiet_stdout, tail
from anvil.harness import memory_error, meta_input_bytes, tensor_bytes

PROTOCOL = "anvil.vet/1"
FLAGS = ("zero_output", "tiny_output", "constant_output", "equals_input", "input_independent")
DISTRIBUTIONS = ("task", "signed", "scaled", "heavy")
SETS_HELD = 4  # sets of inputs vetting holds at once at most (Vet.too_large)
TRIALS = 5  # the runner's trials: a constant across the task's sets is confirmed on this many
SCALES = (1e3, 1e-3)
TINY_FACTOR = 10.0
STRESS_SEED = 7919  # the stress draws' seeds: STRESS_SEED * the input set's seed + the distribution's index
PREFIX = 4096  # close() first compares this many elements: one of them failing decides
CHUNK = 1 << 24  # elements per float64 temporary
DETAIL_LINES = 15
# What a stronger property, holding under the same distribution, makes redundant.
IMPLIES = {"zero_output": ("tiny_output", "constant_output", "input_independent"),
           "tiny_output": ("constant_output", "input_independent")}


class VetError(Exception):
    """The task cannot be vetted (status "error"); `message` is one line, `detail` the evidence."""

    def __init__(self, message, detail=""):
        super().__init__(message)
        self.message = message
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# Request

def parse_request(text):
    """The request with defaults filled in; raises VetError."""
    try:
        request = json.loads(text)
    except ValueError as e:
        raise VetError("bad request: not JSON: %s" % e)
    if not isinstance(request, dict):
        raise VetError("bad request: not a JSON object")
    if request.get("protocol", PROTOCOL) != PROTOCOL:
        raise VetError("bad request: protocol %r, expected %r" % (request.get("protocol"), PROTOCOL))
    if not isinstance(request.get("task_file"), str) or not request["task_file"]:
        raise VetError("bad request: task_file: a non-empty string is required")
    out = dict(request)
    out.setdefault("device", "cpu")
    out.setdefault("seed", 0)
    if out.get("tolerance") is None:
        out["tolerance"] = share.default_tolerance()
    if not isinstance(out["device"], str):
        raise VetError("bad request: device: a string is required")
    if isinstance(out["seed"], bool) or not isinstance(out["seed"], int):
        raise VetError("bad request: seed: an integer is required")
    if not isinstance(out["tolerance"], dict):
        raise VetError("bad request: tolerance: an object is required")
    if out.get("gpu_lock") is not None and not isinstance(out["gpu_lock"], str):
        raise VetError("bad request: gpu_lock: a path is required")
    if not isinstance(out.get("gpu_lock_shared", True), bool):
        raise VetError("bad request: gpu_lock_shared: true or false is required")
    for name, entry in out["tolerance"].items():
        if name != "preset" and not (isinstance(entry, dict) and all(
                isinstance(entry.get(k, 0), (int, float)) or (k == "norm" and entry.get(k) is None)
                for k in ("atol", "rtol", "norm"))):
            raise VetError("bad request: tolerance.%s: {atol, rtol, norm} numbers are required" % name)
    return out


# ---------------------------------------------------------------------------------------------
# Values: leaves of an output, tolerances, comparisons

def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def fmt(x):
    """A number in a detail line: 4 significant digits."""
    return "%.4g" % x if isinstance(x, float) and math.isfinite(x) else str(x)


def tolerance_for(tolerance, dtype):
    """(atol, rtol, norm or None) for `dtype`; None: compared exactly."""
    entry = tolerance.get(dtype_name(dtype))
    if not isinstance(entry, dict):
        return None
    norm = entry.get("norm")
    return float(entry.get("atol", 0.0)), float(entry.get("rtol", 0.0)), None if norm is None else float(norm)


def leaves(value, where="output", depth=0):
    """[(name, tensor)] of a (nested) output, named as the runner names them: output, output 0,
    output 0.1, output 'key'. Non-tensor leaves are left out."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(where, value.detach())]
    out = []
    if isinstance(value, (tuple, list)) and depth < 32:
        items = enumerate(value)
    elif isinstance(value, dict) and depth < 32:
        items = value.items()
    else:
        return out
    for key, item in items:
        part = repr(key) if isinstance(key, str) else str(key)
        out.extend(leaves(item, "%s.%s" % (where, part) if " " in where else "%s %s" % (where, part), depth + 1))
    return out


def map_tensors(value, fn, depth=0):
    """`value` with fn applied to every tensor in it (lists, tuples and dicts rebuilt)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)) and depth < 32:
        return type(value)(map_tensors(v, fn, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 32:
        return {k: map_tensors(v, fn, depth + 1) for k, v in value.items()}
    return value


def _wide(t):
    import torch

    if t.is_complex():
        return t.to(torch.complex128)
    return t.to(torch.float64)


def close(got, expected, tol):
    """Whether `got` (a tensor of expected's shape, or a 0-d tensor broadcast) passes against
    `expected` under `tol` (see tolerance_for), by the runner's rule; NaN/Inf in `got` never pass."""
    import torch

    g_flat = got.reshape(-1)
    e_flat = expected.reshape(-1)
    scalar = g_flat.numel() == 1 and e_flat.numel() != 1
    if e_flat.numel() > PREFIX and not close(g_flat if scalar else g_flat[:PREFIX], e_flat[:PREFIX],
                                              None if tol is None else (tol[0], tol[1], None)):
        return False  # an element that fails fails the whole (most of vet's questions are answered no)
    diff_sq = ref_sq = 0.0
    for start in range(0, e_flat.numel(), CHUNK):
        e = e_flat[start:start + CHUNK]
        g = g_flat if scalar else g_flat[start:start + CHUNK]
        if g.is_floating_point() or g.is_complex():
            if not bool(torch.isfinite(g).all()):
                return False
        if tol is None:
            if not bool((g == e).all()):
                return False
            continue
        atol, rtol, _ = tol
        ew = _wide(e)
        diff = (_wide(g) - ew).abs()
        if not bool((diff <= atol + rtol * ew.abs()).all()):
            return False
        diff_sq += float((diff * diff).sum())
        ref_sq += float((ew.abs() ** 2).sum())
    if tol is not None and tol[2] is not None and ref_sq > 0:
        return math.sqrt(diff_sq) / math.sqrt(ref_sq) <= tol[2]
    return True


def stats(t):
    """{"max_abs", "mean", "std", "zero", "nonfinite"} of a tensor, in float64, chunk by chunk."""
    import torch

    flat = t.reshape(-1)
    n = flat.numel()
    max_abs, total, total_sq, zero, nonfinite = 0.0, 0.0, 0.0, True, False
    for start in range(0, n, CHUNK):
        c = flat[start:start + CHUNK]
        zero = zero and bool((c == 0).all())
        w = _wide(c)
        if w.is_complex():
            w = w.abs()
        if not bool(torch.isfinite(w).all()):
            nonfinite = True
            w = torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)
        max_abs = max(max_abs, float(w.abs().max()))
        total += float(w.sum())
        total_sq += float((w * w).sum())
    mean = total / n if n else 0.0
    var = max(total_sq / n - mean * mean, 0.0) if n > 1 else 0.0
    return {"max_abs": max_abs, "mean": mean, "std": math.sqrt(var * n / (n - 1)) if n > 1 else 0.0,
            "zero": zero and n > 0, "nonfinite": nonfinite}


def constant_of(t, tol):
    """The mean of `t` rounded to its dtype, when every element equals it within `tol`; else None.
    (The mean summed chunk by chunk in float64: no float64 copy of the whole output.)"""
    import torch

    if t.numel() < 2:
        return None
    if t.dtype == torch.bool or not (t.is_floating_point() or t.is_complex()):
        first = t.reshape(-1)[:1]
        return first if bool((t == first).all()) else None
    flat = t.reshape(-1)
    total = sum(_wide(flat[start:start + CHUNK]).sum() for start in range(0, flat.numel(), CHUNK))
    mean = (total / flat.numel()).to(t.dtype).reshape(1)
    return mean if close(mean, t, tol) else None


def constant_across(outputs, tolerance):
    """[(leaf name, value)] of the float leaves for which one number, the mean of every element of
    that leaf over `outputs` (the reference's outputs of several input sets) rounded to its dtype,
    passes against each of them within tolerance: a candidate returning it passes every trial.
    Scalars included (a loss), which constant_of leaves out."""
    import torch

    found = []
    for name, t in leaves(outputs[0]):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        same = [dict(leaves(o)).get(name) for o in outputs]
        if any(x is None or x.shape != t.shape or x.dtype != t.dtype for x in same):
            continue
        total = sum(float(_wide(x).sum()) for x in same)
        value = torch.tensor([total / sum(x.numel() for x in same)], dtype=torch.float64).to(t.dtype).to(t.device)
        tol = tolerance_for(tolerance, t.dtype)
        if math.isfinite(float(value[0])) and all(close(value, x, tol) for x in same):
            found.append((name, float(value[0])))
    return found


# ---------------------------------------------------------------------------------------------
# Input distributions

def _generator(device, seed):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _is_float(t):
    return t.is_floating_point()


signed = stress.signed
student_t2 = stress.student_t2


def transform(inputs, fn):
    """`inputs` with fn applied to every float tensor (integer, bool and complex tensors as given)."""
    return map_tensors(inputs, lambda t: fn(t) if _is_float(t) else t)


# ---------------------------------------------------------------------------------------------
# The vetting

class _Shape:
    """A tensor's shape and dtype without its memory."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class Observation:
    """What one reference call showed: the output's leaves, their stats, constant outputs and
    outputs equal to an input."""

    def __init__(self, output, inputs, tolerance):
        import torch

        tensors = [(n, t) for n, t in leaves(output) if t.numel() > 0]
        # the leaves' names, shapes and dtypes (not the tensors: an observation outlives its output)
        self.leaves = [(n, _Shape(tuple(t.shape), t.dtype)) for n, t in tensors]
        self.stats = {n: stats(t) for n, t in tensors}
        self.constant = {}
        self.equal_inputs = {}
        flat_inputs = [(i, x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        for name, t in tensors:
            tol = tolerance_for(tolerance, t.dtype)
            c = constant_of(t, tol)
            if c is not None:
                self.constant[name] = float(_wide(c).abs()[0]) if c.is_complex() else float(c[0])
            self.equal_inputs[name] = [i for i, x in flat_inputs
                                       if x.shape == t.shape and x.dtype == t.dtype and x.device == t.device
                                       and close(x, t, tol)]


class Vetting:
    """One request's vetting: load the task, run it on each distribution, decide flags and notes."""

    def __init__(self, request):
        import torch

        self.torch = torch
        self.req = request
        self.path = request["task_file"]
        self.tolerance = request["tolerance"]
        self.seeds = [request["seed"] + 1, request["seed"] + 2]
        self.device = None
        self.device_draws = None  # whether get_inputs() runs with the device as default (inputs)
        self.report = {"protocol": PROTOCOL, "status": "done", "message": "", "detail": "", "flags": [],
                       "notes": [], "outputs": [], "distributions": [], "seeds": self.seeds,
                       "memory_limited": False, "need_bytes": None, "gpu_bytes": None, "stress": {}}
        self.model_bytes = 0
        self.gpu_lock = None  # timing.GpuLock, where the request names one

    # -- set-up -----------------------------------------------------------------------------
    def setup_device(self):
        torch = self.torch
        if self.req.get("gpu_lock") is not None:  # before CUDA starts: shared beside other vettings, else alone
            from anvil import timing

            self.gpu_lock = timing.GpuLock(self.req["gpu_lock"], shared=self.req.get("gpu_lock_shared", True))
            self.report["lock_wait_s"] = self.gpu_lock.waited_s
        try:
            device = torch.device(self.req["device"])
        except (RuntimeError, ValueError) as e:
            raise VetError("bad request: device %r: %s" % (self.req["device"], e))
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise VetError("device cuda: CUDA is not available to this torch (%s)" % torch.__version__)
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(device)
        elif device.type != "cpu":
            raise VetError("bad request: device %r: only cuda and cpu are supported" % self.req["device"])
        # The reference's arithmetic as the runner pins it (TF32 off).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.device = device

    def seed_all(self, seed):
        self.torch.manual_seed(seed)
        random.seed(seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(seed % (1 << 32))

    def _call(self, what, fn, *args):
        try:
            return fn(*args)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - the task's failure is the answer
            if self.device.type == "cuda" and memory_error(e, self.torch) is not None:
                raise  # the GPU's size, not the task's fault: vet() decides (out_of_memory)
            raise VetError("%s: %s raised %s" % (self.path, what, _what(e)), _trace(e))

    def _call_list(self, name):
        result = self._call("%s()" % name, getattr(self.module, name))
        if not isinstance(result, (list, tuple)):
            raise VetError("%s: %s() returned %s, expected a list or tuple" % (self.path, name, type(result).__name__))
        return list(result)

    def load(self):
        from anvil import task_probe

        try:
            self.module = task_probe.load_task(self.path)
        except task_probe.TaskError as e:
            raise VetError(e.cause, e.detail)
        model = getattr(self.module, "Model", None)
        if not (isinstance(model, type) and issubclass(model, self.torch.nn.Module)):
            raise VetError("%s: no class `Model` (a torch.nn.Module subclass) defined" % self.path)
        for name in ("get_inputs", "get_init_inputs"):
            if not callable(getattr(self.module, name, None)):
                raise VetError("%s: no function `%s` defined" % (self.path, name))
        seed = self.req["seed"]
        self.seed_all(seed)
        init = self._call_list("get_init_inputs")
        self.seed_all(seed)
        self.model = self._call("Model(*get_init_inputs())", lambda: model(*init).eval().to(self.device))
        self.input_names = _forward_names(self.model)
        self.model_bytes = sum(t.numel() * t.element_size() for t in [*self.model.parameters(), *self.model.buffers()])

    def inputs(self, seed):
        """get_inputs() after seeding with `seed`, drawn with the device as torch's default device
        where the task allows it (a GPU draws gigabytes in milliseconds; the host takes about a
        second a gigabyte), else on the host and moved; as the runner draws an evaluation's trials."""
        if self.device.type == "cuda" and self.device_draws is not False:
            try:
                self.seed_all(seed)
                with self.torch.device(self.device):
                    args = self._call_list("get_inputs")
                self.device_draws = True
                return map_tensors(args, lambda t: t.to(self.device))
            except VetError:
                if self.device_draws:
                    raise
                self.device_draws = False
        self.seed_all(seed)
        args = self._call_list("get_inputs")
        return self._call("moving get_inputs() to %s" % self.device,
                          lambda: map_tensors(args, lambda t: t.to(self.device)))

    def too_large(self):
        """Why this task's inputs are too large to vet on this GPU (None when they fit): vetting holds
        about SETS_HELD sets of inputs at once (two seeds' sets, a distribution's set, a clone)."""
        if self.device.type != "cuda":
            return None
        nbytes = meta_input_bytes(getattr(self.module, "get_inputs"), self.seed_all, self.seeds[0])
        if nbytes is None:  # the size shows when the task's own draw runs
            return None
        self.need(nbytes)
        free, _total = self.torch.cuda.mem_get_info(self.device)
        if SETS_HELD * nbytes <= free:
            return None
        return ("not vetted: one set of the task's inputs takes %.1f GiB and vetting holds about %d sets at once "
                "(%.1f GiB free on the GPU)" % (nbytes / 2 ** 30, SETS_HELD, free / 2 ** 30))

    def need(self, set_bytes, output_bytes=None):
        """The report's need_bytes: about what vetting holds on the GPU at most (SETS_HELD sets of
        inputs of set_bytes each, a pair of outputs, the model's weights; an output as large as a
        set of inputs until one is seen), and gpu_bytes, the GPU's size: anvil vets tasks that ran
        out of memory beside others again as many at a time as their needs fit (vet_many)."""
        if self.device.type != "cuda":
            return
        out = set_bytes if output_bytes is None else output_bytes
        self.report["need_bytes"] = int(SETS_HELD * set_bytes + 2 * out + self.model_bytes)
        self.report["gpu_bytes"] = int(self.torch.cuda.mem_get_info(self.device)[1])

    def note_peak(self):
        """peak_bytes: the most torch's allocator held at once (need_bytes' estimate, checked)."""
        if self.device is not None and self.device.type == "cuda":
            self.report["peak_bytes"] = int(self.torch.cuda.max_memory_allocated(self.device))

    def run(self, inputs):
        """The reference's output on clones of `inputs` (a task that writes into its inputs must not
        change the pristine copies compared with its output)."""
        args = map_tensors(inputs, lambda t: t.clone())
        with self.torch.no_grad():
            out = self.model(*args)
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
        return out

    # -- distributions ----------------------------------------------------------------------
    def input_sets(self, name, base):
        """(label, seed, transformation, inputs) of distribution `name`, built one at a time from
        the task's own input sets `base` ([(seed, inputs)]), each transformation's seeds in turn
        (so that a pair's outputs are compared, and let go, before the next pair is made)."""
        if name == "scaled":
            for scale in SCALES:
                for seed, inputs in base:
                    yield "seed %d, x%g" % (seed, scale), seed, scale, transform(inputs, lambda t, s=scale: t * s)
            return
        for seed, inputs in base:
            if name == "task":
                yield "seed %d" % seed, seed, name, inputs
            elif name == "signed":
                g = _generator(self.device, 7919 * seed + 1)
                yield "seed %d, signed" % seed, seed, name, transform(inputs, lambda t: signed(t, g))
            elif name == "heavy":
                g = _generator(self.device, 7919 * seed + 2)
                yield "seed %d, Student-t(2)" % seed, seed, name, transform(inputs, lambda t: student_t2(t, g))

    def observe(self, name, base, keep_outputs=False):
        """([(label, seed, Observation, output or None)], [(label, label, same)]) over the
        distribution: its observations, and for each transformation whether the two seeds' outputs
        pass against each other. Outputs are kept only with keep_outputs; else at most a pair's
        two are alive at once. Raises VetError if the reference fails."""
        seen, pairs, first = [], [], {}
        for label, seed, key, inputs in self.input_sets(name, base):
            out = self._call("Model.forward on the inputs of %s" % label, self.run, inputs)
            if not leaves(out):
                raise VetError("%s: Model.forward returned %s, which holds no tensor" % (self.path, type(out).__name__))
            seen.append((label, seed, Observation(out, inputs, self.tolerance), out if keep_outputs else None))
            del inputs
            if key in first:
                la, a = first.pop(key)
                pairs.append((la, label, _same_output(a, out, self.tolerance)))
                del a
            else:
                first[key] = (label, out)
            del out
        return seen, pairs

    def properties(self, seen, pairs, same_inputs):
        """{flag: detail} of what holds on every observation of one distribution (pairs:
        observe's)."""
        obs = [o for _, _, o, _ in seen]
        found = {}
        stats_all = [s for o in obs for s in o.stats.values()]
        if stats_all and all(s["zero"] for s in stats_all):
            found["zero_output"] = self._zero_detail(obs[0])
        tiny = []
        for name, t in obs[0].leaves:
            tol = tolerance_for(self.tolerance, t.dtype)
            if tol is None or not all(name in o.stats and o.stats[name]["max_abs"] < TINY_FACTOR * tol[0] for o in obs):
                break
            tiny.append((name, t.dtype, max(o.stats[name]["max_abs"] for o in obs), tol[0]))
        else:
            if tiny:
                found["tiny_output"] = self._tiny_detail(tiny)
        constant = [n for n, _ in obs[0].leaves if all(n in o.constant for o in obs)]
        if constant:
            found["constant_output"] = self._constant_detail(obs[0], constant)
        equal = [(n, i) for n, _ in obs[0].leaves for i in obs[0].equal_inputs[n]
                 if all(i in o.equal_inputs.get(n, ()) for o in obs)]
        if equal:
            found["equals_input"] = self._equals_detail(obs[0], equal)
        if pairs and all(same for _, _, same in pairs):
            la, lb, _ = pairs[0]
            found["input_independent"] = self._independent_detail(la, lb, same_inputs)
        for strong, weak in IMPLIES.items():
            if strong in found:
                for w in weak:
                    found.pop(w, None)
        return found

    # -- detail lines -----------------------------------------------------------------------
    def _describe(self, obs, name):
        t = dict(obs.leaves)[name]
        return "%s %s %s" % (name, list(t.shape), dtype_name(t.dtype))

    def _zero_detail(self, obs):
        what = ", ".join(self._describe(obs, n) for n, _ in obs.leaves)
        return "every element of the reference output is exactly 0 (%s): a kernel that only writes zeros passes" % what

    def _tiny_detail(self, tiny):
        parts = ["%s: max |value| %s < 10*atol = %s (%s)" % (n, fmt(m), fmt(TINY_FACTOR * a), dtype_name(d))
                 for n, d, m, a in tiny]
        return ("the reference output is below ten times the absolute tolerance (%s; preset %s): "
                "the check cannot tell it from zero" % ("; ".join(parts), self.tolerance.get("preset", "?")))

    def _constant_detail(self, obs, names):
        parts = ["%s (every element %s)" % (self._describe(obs, n), fmt(obs.constant[n])) for n in names]
        return ("%s: every element is equal within tolerance: one number broadcast to the output's shape passes"
                % "; ".join(parts))

    def _equals_detail(self, obs, pairs):
        parts = []
        for name, i in pairs:
            arg = self.input_names[i] if i < len(self.input_names) else None
            parts.append("%s equals input %d%s" % (self._describe(obs, name), i, " (%s)" % arg if arg else ""))
        return "%s within tolerance: returning the input passes" % "; ".join(parts)

    def _independent_detail(self, label_a, label_b, same_inputs):
        text = ("the reference outputs for the inputs of %s and of %s are equal within tolerance: an output "
                "computed once and replayed passes every trial" % (label_a, label_b))
        if same_inputs:
            text += " (get_inputs() gives the same inputs for every seed)"
        return text

    def constant_over_trials(self, outputs):
        """The constant_output detail when one number passes the task's first two input sets
        (constant_across) and, drawn now, the rest of the runner's TRIALS; else None."""
        if not constant_across(outputs, self.tolerance):
            return None
        first = self.seeds[0]
        for seed in range(first + len(outputs), first + TRIALS):
            outputs.append(self._call("Model.forward on the inputs of seed %d" % seed, self.run, self.inputs(seed)))
        found = constant_across(outputs, self.tolerance)
        if not found:
            return None
        parts = ["%s %s %s: %s" % (n, list(dict(leaves(outputs[0]))[n].shape),
                                   dtype_name(dict(leaves(outputs[0]))[n].dtype), fmt(v)) for n, v in found]
        return ("one number, the mean of the reference's outputs over the inputs of seeds %d-%d, passes every one "
                "of them within tolerance (%s): a candidate that returns it passes every trial" % (
                    first, first + TRIALS - 1, "; ".join(parts)))

    def out_of_memory(self, e, doing):
        """`e` when it is the GPU running out of memory (the task's size against this GPU, not the
        task's fault): its memory given back and, with `doing`, the task noted not_vetted; any other
        exception is raised again."""
        if self.device.type != "cuda" or memory_error(e, self.torch) is None:
            raise e
        self.report["memory_limited"] = True
        traceback.clear_frames(e.__traceback__)  # the frames' tensors, so the memory can go back now
        self.torch.cuda.empty_cache()
        if doing is not None:
            self.report["notes"].append({"flag": "not_vetted", "distributions": [], "detail": (
                "not vetted: the GPU ran out of memory %s (vetting holds about %d sets of inputs and their "
                "transformations at once): %s" % (doing, SETS_HELD, one_line(str(e))[:160]))})

    # -- all of it --------------------------------------------------------------------------
    def vet(self):
        try:
            self.setup_device()
            self.load()
        except VetError:
            raise
        except Exception as e:  # noqa: BLE001 - only the GPU's memory running out is decided here
            # CUDA's start or the model's placement on a GPU that others fill (vettings beside
            # this one): memory_limited, so that anvil vets it again alone; not the task's error
            if self.req["device"] == "cpu" or memory_error(e, self.torch) is None:
                raise
            self.device = self.torch.device(self.req["device"])
            return self.out_of_memory(e, "starting CUDA or placing the task's model")
        why = self.too_large()
        if why is not None:
            self.report["notes"].append({"flag": "not_vetted", "detail": why, "distributions": []})
            self.report["memory_limited"] = True
            return
        try:
            base = [(seed, self.inputs(seed)) for seed in self.seeds]
        except Exception as e:  # noqa: BLE001 - only the GPU's memory running out is decided here
            return self.out_of_memory(e, "drawing the task's inputs")
        self.need(tensor_bytes(base[0][1]))
        same_inputs = _same_output(base[0][1], base[1][1], None)
        holds = {}  # flag -> [(distribution, detail)]
        for name in DISTRIBUTIONS:
            entry = {"name": name, "input_sets": 0, "skipped": None, "nonfinite": None}
            self.report["distributions"].append(entry)
            try:
                seen, pairs = self.observe(name, base, keep_outputs=name == "task")
                if name == "task":
                    self.need(tensor_bytes(base[0][1]), tensor_bytes(seen[0][3]))
                found = self.properties(seen, pairs, same_inputs and name == "task")
                if name == "task" and not {"constant_output", "zero_output", "tiny_output"} & set(found):
                    detail = self.constant_over_trials([out for _, _, _, out in seen])
                    if detail:
                        found["constant_output"] = detail
            except VetError as e:
                if name == "task":
                    raise
                entry["skipped"] = one_line(e.message)
                continue
            except Exception as e:  # noqa: BLE001
                seen = found = None
                if name == "task":  # nothing can be said of the task as given
                    return self.out_of_memory(e, "running its inputs")
                self.out_of_memory(e, None)
                entry["skipped"] = "the GPU ran out of memory for this distribution's inputs"
                continue
            entry["input_sets"] = len(seen)
            bad = [n for _, _, o, _ in seen for n, s in o.stats.items() if s["nonfinite"]]
            if bad:
                entry["nonfinite"] = "%s holds NaN or Inf" % bad[0]
            if name == "task":
                self.report["outputs"] = [
                    {"name": n, "shape": list(t.shape), "dtype": dtype_name(t.dtype),
                     "max_abs": seen[0][2].stats[n]["max_abs"], "std": seen[0][2].stats[n]["std"]}
                    for n, t in seen[0][2].leaves]
            for flag, detail in found.items():
                holds.setdefault(flag, []).append((name, detail))
            del seen
        self.report["stress"] = self.stress_rules(base)
        for flag in FLAGS:
            if flag not in holds:
                continue
            where = [d for d, _ in holds[flag]]
            item = {"flag": flag, "detail": holds[flag][0][1], "distributions": where}
            self.report["flags" if where[0] == "task" else "notes"].append(item)


    # -- the stress trials' rules (anvil.stress) ---------------------------------------------
    def stress_rules(self, base):
        """{distribution: {"rule", "reference_error", "why"}} for every stress distribution, on its
        draws after the seeds of the task's two input sets (the worse one counts): the rule the judge uses
        for the task's stress trials (anvil.stress.condition), "unknown" where this machine could
        not tell (the GPU ran out of memory: the judge then decides on its own draw)."""
        from anvil import evidence

        out = {}
        for name in stress.DISTRIBUTIONS:
            found = None
            try:
                for seed, _inputs in base:
                    mode = stress.transforming(name, STRESS_SEED * seed + stress.DISTRIBUTIONS.index(name))
                    with mode:
                        x = self.inputs(seed)
                    if not type(mode).changed:
                        found = {"rule": None, "reference_error": None,
                                 "why": "get_inputs() draws no random float tensor to transform"}
                        break
                    ref32 = self._call("Model.forward on %s inputs" % name, self.run, x)
                    try:
                        ref64 = evidence.float64_run(self.model, x)
                        if self.device.type == "cuda":
                            self.torch.cuda.synchronize()
                    except KeyboardInterrupt:
                        raise
                    except BaseException as e:  # noqa: BLE001 - no float64: unusable, unless it is the GPU's size
                        if self.device.type == "cuda" and memory_error(e, self.torch) is not None:
                            raise
                        ref64 = None
                    one = stress.condition(ref32, ref64)
                    found = one if found is None else stress.worse(found, one)
                    del x, ref32, ref64
                    if found["rule"] is None:
                        break
            except VetError as e:
                found = {"rule": None, "reference_error": None, "why": one_line(e.message)}
            except Exception as e:  # noqa: BLE001 - only the GPU's memory running out is decided here
                if self.device.type != "cuda" or memory_error(e, self.torch) is None:
                    raise
                self.torch.cuda.empty_cache()
                found = {"rule": "unknown", "reference_error": None,
                         "why": "the GPU ran out of memory for its float64 run here"}
            out[name] = found
        return out


def _same_output(a, b, tolerance):
    """Whether output (or input list) `b` passes against `a`: the same structure, every tensor
    within tolerance (tolerance None: bitwise equal values)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        tol = tolerance_for(tolerance, a.dtype) if tolerance is not None else None
        return a.numel() == 0 or close(b, a, tol)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(
            _same_output(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_same_output(a[k], b[k], tolerance) for k in a)
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _forward_names(model):
    """The names of Model.forward's positional parameters, best effort."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _what(exc):
    message = one_line(str(exc))
    return "%s: %s" % (type(exc).__name__, message) if message else type(exc).__name__


def _trace(exc):
    return tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), DETAIL_LINES)


def vet(request_text):
    """The report for one request (never raises, but for KeyboardInterrupt)."""
    started = time.perf_counter()
    report = {"protocol": PROTOCOL, "status": "error", "message": "", "detail": "", "flags": [], "notes": [],
              "outputs": [], "distributions": [], "seeds": []}
    try:
        request = parse_request(request_text)
        with quiet_stdout():
            vetting = Vetting(request)
            report = vetting.report
            vetting.vet()
            vetting.note_peak()
    except VetError as e:
        report.update(status="error", message=e.message, detail=e.detail or "")
    except Exception as e:  # noqa: BLE001 - a report even when the vetting itself breaks
        report.update(status="error", message="anvil.vet failed: %s" % _what(e), detail=_trace(e))
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def main():
    """One request on stdin, one report on fd 3 when it is open (anvil.zygote's child), else the
    last line of stdout."""
    return answer_one(PROTOCOL, vet)


def entry():
    """`python -I -c "...; vet.entry()"` (anvil's fresh process): run, flush, and skip the
    interpreter's teardown (a task's threads or atexit hooks must not hang it after the report)."""
    exit_after(main)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.exit(status)
