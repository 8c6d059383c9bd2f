"""Fused tasks of 1-5 catalogue operators, as KernelBench-format files, reproducible from a seed.

compose(catalogue, seed, index) draws task `index` of run `seed` (random.Random over the string
"seed:index", so any task can be made again alone): a chain length by CUDA-Agent-Ops-6K's shares
(1: 3.40%, 2: 83.77%, 3: 7.62%, 4: 2.80%, 5: 1.23%; a transformers layer alone 1.18%), a first
operator weighted towards the heavy families (convolution, GEMM) as KernelBench's fused tasks
begin, then operators that take the running tensor's rank, each canonical operation equally
likely. Shapes are inferred by running the chain on the meta device (no memory, no time); the
batch size is then chosen so that the eager runtime *estimate* (estimate()) lands at a target
drawn log-uniformly in [2, 50] ms, inside the paper's window of 1-100 ms.

The task is rendered twice: at full size (the task) and with the batch at PROBE_BATCH (the
instance the CPU stage runs: the same code, the same parameters, a smaller batch).
"""
import math
import random
import re

from anvil.synth.catalog import INPUT_PLACEHOLDERS, CHOICES, chan_shape, canonical

CHAIN_SHARES = {1: 3.40, 2: 83.77, 3: 7.62, 4: 2.80, 5: 1.23}
STANDALONE_SHARE = 1.18  # per cent of tasks that are one transformers layer alone
FIRST_FAMILY_WEIGHTS = {"convolution": 3.0, "gemm": 2.0, "normalization": 1.0, "pooling": 0.5,
                        "reduction": 0.5, "elementwise": 1.0}
# the input's dims per rank: (name, choices); dim 0 is the batch
INPUT_DIMS = {
    2: [("features", [256, 512, 1024, 2048, 4096, 8192])],
    3: [("channels", [16, 32, 64, 128, 256]), ("length", [256, 512, 1024, 2048, 4096])],
    4: [("channels", [3, 16, 32, 64, 128]), ("height", [16, 32, 64, 128, 256]), ("width", None)],
    5: [("channels", [3, 8, 16, 32]), ("depth", [8, 16, 32]), ("height", [16, 32, 64]), ("width", None)],
}
PROBE_BATCH = 2
MIN_BATCH = 64  # the probe (PROBE_BATCH samples) at most 1/32 of the task
PROBE_SAMPLE_BYTES = 8 << 20  # one sample's widest tensor: the probe's at most 16 MiB
MAX_BATCH = 1 << 20
TARGET_MS = (2.0, 50.0)  # the estimate a composition aims at (log-uniform)
WINDOW_MS = (1.0, 100.0)  # the paper's eager runtime window
MAX_TENSOR_BYTES = 2 << 30  # the input, the output and each intermediate at most 2 GiB
MAX_TOTAL_BYTES = 6 << 30  # inputs, parameters and output together

# The eager runtime estimate of the CPU stage, for an H100 SXM: fp32 arithmetic at 60% of its
# 67 TFLOP/s (TF32 off, as the judge's baseline), HBM3 at 80% of 3.35 TB/s, and a launch per aten
# operation; compute and memory time are summed (no overlap assumed). The GPU stage measures.
ESTIMATE = {"flops_per_s": 0.6 * 67e12, "bytes_per_s": 0.8 * 3.35e12, "launch_s": 5e-6}


class ComposeError(Exception):
    """No task for this draw; the message is the reason (recorded, the run goes on)."""

    def __init__(self, reason, detail=""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class Step:
    """One operator of a chain, its free choices drawn."""

    def __init__(self, op, choices):
        self.op, self.choices = op, choices

    def values(self, shape):
        c = shape[1] if len(shape) > 1 else shape[0]
        v = dict(self.choices)
        v.update(c=c, last=shape[-1], x="x", chan_shape=chan_shape(c, len(shape)), p="p")
        return v


class Task:
    def __init__(self, seed, index, steps, dims, batch, shapes, estimate):
        self.seed, self.index, self.steps, self.dims, self.batch = seed, index, steps, dims, batch
        self.shapes, self.estimate = shapes, estimate  # input shape of each step, then the output's

    @property
    def ops(self):
        return [s.op["name"].split("(")[0] for s in self.steps]

    @property
    def canonical_ops(self):
        return [s.op["canonical"] for s in self.steps]

    def key(self):
        """Near-duplicates share it: the same operations with the same non-size choices."""
        parts = []
        for s in self.steps:
            fixed = {k: v for k, v in s.choices.items() if k not in ("c_out", "f_out")}
            parts.append("%s%s" % (s.op["canonical"], sorted(fixed.items())))
        return "|".join(parts) + "|rank%d" % len(self.shapes[0])

    def data_source(self):
        return "transformers" if self.steps[0].op["source"] == "transformers" else "torch#%d" % len(self.steps)

    def code(self, batch=None):
        return render(self, self.batch if batch is None else batch)


def _weighted(rng, weights):
    items = sorted(weights.items())
    total = sum(w for _, w in items)
    r = rng.uniform(0, total)
    for k, w in items:
        r -= w
        if r <= 0:
            return k
    return items[-1][0]


def _choose(rng, op, shape):
    out = {}
    template = (op.get("init") or op.get("call")) + op.get("param", "")
    for name in sorted(set(re.findall(r"\{(\w+)\}", template)) - INPUT_PLACEHOLDERS):
        if name == "groups":
            divisors = [g for g in CHOICES["groups"] if shape[1] % g == 0]
            if not divisors:
                raise ValueError("no group count divides %d channels" % shape[1])
            out[name] = rng.choice(divisors)
        else:
            out[name] = rng.choice(op["params"][name])
    return out


def eligible(catalogue):
    """Operators a composition may use: deterministic, fp32, not standalone."""
    return [op for op in catalogue["operators"]
            if not op["stochastic"] and "float32" in op["dtypes"] and not op["standalone"]]


def meta_run(steps, shape, torch):
    """The shapes after each step on the meta device (raises what the chain raises)."""
    shapes = [tuple(shape)]
    with torch.device("meta"), torch.no_grad():
        x = torch.empty(shape)
        for s in steps:
            f = callable_for(s, tuple(x.shape), torch)
            x = f(x)
            if not isinstance(x, torch.Tensor):
                raise TypeError("%s returned %s" % (s.op["name"], type(x).__name__))
            shapes.append(tuple(x.shape))
    return shapes


def _scope(torch, op):
    import importlib

    scope = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    if op["source"] == "transformers":
        module = op["init"].split("(")[0].rsplit(".", 1)[0]
        importlib.import_module(module)
        scope["transformers"] = importlib.import_module("transformers")
    return scope


def callable_for(step, shape, torch):
    """A function computing `step` on a tensor of `shape` (its module or parameter made on the
    current default device)."""
    op, v = step.op, step.values(shape)
    scope = _scope(torch, op)
    if op["kind"] == "module":
        return eval(op["init"].format(**v), scope)  # noqa: S307 - the catalogue's templates
    if "param" in op:
        scope["p"] = torch.randn(*eval(op["param"].format(**v)))  # noqa: S307
    return eval("lambda x: " + op["call"].format(**v), scope)  # noqa: S307


def estimate(steps, shape, torch):
    """{flops, bytes, launches, ms}: the eager runtime estimate of the chain on `shape`."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    class Traffic(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bytes, self.launches = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view:
                self.launches += 1
                self.bytes += sum(t.numel() * t.element_size() for t in tree_leaves((args, kwargs, out))
                                  if isinstance(t, torch.Tensor))
            return out

    with torch.device("meta"), torch.no_grad():
        fns = []
        x = torch.empty(shape)
        for s in steps:  # modules made outside the counting (their initialisation is not the task)
            f = callable_for(s, tuple(x.shape), torch)
            fns.append(f)
            x = f(x)
        x = torch.empty(shape)
        flops, traffic = FlopCounterMode(display=False), Traffic()
        with flops, traffic:
            for f in fns:
                x = f(x)
    seconds = (flops.get_total_flops() / ESTIMATE["flops_per_s"] + traffic.bytes / ESTIMATE["bytes_per_s"]
               + traffic.launches * ESTIMATE["launch_s"])
    return {"flops": int(flops.get_total_flops()), "bytes": int(traffic.bytes), "launches": traffic.launches,
            "ms": round(seconds * 1e3, 4)}


def _param_bytes(steps, shapes, torch):
    total = 0
    with torch.device("meta"):
        for s, shape in zip(steps, shapes):
            f = callable_for(s, shape, torch)
            if isinstance(f, torch.nn.Module):
                total += sum(p.numel() * 4 for p in f.parameters()) + sum(b.numel() * 4 for b in f.buffers())
            elif "param" in s.op:
                total += math.prod(eval(s.op["param"].format(**s.values(shape)))) * 4  # noqa: S307
    return total


def compose(catalogue, seed, index, torch):
    """Task `index` of run `seed`, or ComposeError(reason)."""
    rng = random.Random("%d:%d" % (seed, index))
    ops = eligible(catalogue)
    standalone = [op for op in catalogue["operators"] if op["standalone"] and "float32" in op["dtypes"]
                  and not op["stochastic"]]
    if standalone and rng.uniform(0, 100) < STANDALONE_SHARE:
        length, first_pool = 1, standalone
    else:
        length = _weighted(rng, CHAIN_SHARES)
        family = _weighted(rng, {f: w for f, w in FIRST_FAMILY_WEIGHTS.items() if any(o["family"] == f for o in ops)})
        first_pool = [o for o in ops if o["family"] == family]
    first = rng.choice(first_pool)
    rank = int(rng.choice(sorted(first["ranks"])))
    dims, shape = {}, [1]
    for name, choices in INPUT_DIMS[rank]:
        dims[name] = dims["height"] if choices is None else rng.choice(choices)
        shape.append(dims[name])
    shape[0] = 8  # the batch the estimate is first made at (size() sets the task's)
    steps, shapes = [], None
    for position in range(length):
        pool = [first] if position == 0 else None
        for attempt in range(8):
            if pool is None or attempt:
                current = shapes[-1] if shapes else tuple(shape)
                groups = {}
                for o in ops:
                    if str(len(current)) in o["ranks"] and (position or o in first_pool):
                        groups.setdefault(o["canonical"], []).append(o)
                if not groups:
                    raise ComposeError("no_operator", "no operator takes a rank-%d tensor" % len(current))
                op = rng.choice(groups[rng.choice(sorted(groups))])
            else:
                op = first
            current = shapes[-1] if shapes else tuple(shape)
            try:
                step = Step(op, _choose(rng, op, current))
                trial = meta_run(steps + [step], shape, torch)
            except Exception as e:  # noqa: BLE001 - an incompatible draw: draw again
                last = "%s on %s: %s" % (op["name"], list(current), str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
                continue
            if position < length - 1 and len(trial[-1]) < 2:
                last = "%s reduces to rank %d before the chain's end" % (op["name"], len(trial[-1]))
                continue
            if any(d == 0 for d in trial[-1]):
                last = "%s leaves an empty tensor" % op["name"]
                continue
            steps.append(step)
            shapes = trial
            break
        else:
            raise ComposeError("no_compatible_operator", last)
    return size(rng, steps, shape, dims, seed, index, torch)


def make(catalogue, names, rank, torch, seed=0, index=0, choices=None):
    """The task of the named operators in order (the first entry of each name, its first choices
    unless `choices` gives them), on an input of `rank` with the first size of each dim: a task
    chosen rather than drawn (tests, and a user's own compositions)."""
    by_name = {}
    for op in catalogue["operators"]:
        by_name.setdefault(op["name"], op)
    dims, shape = {}, [8]
    for name, options in INPUT_DIMS[rank]:
        dims[name] = dims["height"] if options is None else options[len(options) // 2]
        shape.append(dims[name])
    steps = []
    for k, name in enumerate(names):
        if name not in by_name:
            raise ComposeError("no_operator", "the catalogue has no operator %s" % name)
        op = by_name[name]
        current = meta_run(steps, tuple(shape), torch)[-1]
        picked = {p: (choices or {}).get(p, CHOICES[p][0]) for p in op["params"]}
        if "groups" in op["params"]:
            picked["groups"] = next(g for g in CHOICES["groups"] if current[1] % g == 0)
        steps.append(Step(op, picked))
    return size(random.Random("%d:%d" % (seed, index)), steps, shape, dims, seed, index, torch)


def size(rng, steps, shape, dims, seed, index, torch):
    """The batch that brings the estimate to a log-uniform target in TARGET_MS: the spatial dims
    (not the channels) halved first while a sample costs so much that the batch would be under
    MIN_BATCH, or its widest tensor is over PROBE_SAMPLE_BYTES (the CPU stage runs PROBE_BATCH
    samples). ComposeError when no batch fits the memory caps or the batch is under MIN_BATCH."""
    target = math.exp(rng.uniform(math.log(TARGET_MS[0]), math.log(TARGET_MS[1])))
    shape = list(shape)
    while True:
        at8 = estimate(steps, tuple(shape), torch)
        per_sample = max(at8["ms"] - at8["launches"] * ESTIMATE["launch_s"] * 1e3, 1e-9) / shape[0]
        widest_tensor = max(math.prod(s[1:]) * 4 for s in meta_run(steps, tuple(shape), torch))
        if (min(target / per_sample, MAX_TENSOR_BYTES / widest_tensor) >= MIN_BATCH
                and widest_tensor <= PROBE_SAMPLE_BYTES):
            break
        spatial = [i for i, (name, _) in enumerate(INPUT_DIMS[len(shape)], 1) if name != "channels" and shape[i] > 8]
        if not spatial:
            break
        smaller = list(shape)
        widest = max(spatial, key=lambda i: shape[i])
        smaller[widest] //= 2
        if INPUT_DIMS[len(shape)][widest - 1][0] == "height" and "width" in dims:  # square images stay square
            smaller[widest + 1] = smaller[widest]
        try:
            meta_run(steps, tuple(smaller), torch)
        except Exception:  # noqa: BLE001 - the chain needs the size it has
            break
        shape = smaller
    if widest_tensor > PROBE_SAMPLE_BYTES:
        raise ComposeError("too_heavy_per_sample", "a sample's widest tensor is %.3g MiB (at most %g) and no dim "
                           "can be halved" % (widest_tensor / 2**20, PROBE_SAMPLE_BYTES / 2**20))
    for i, (name, _) in enumerate(INPUT_DIMS[len(shape)], 1):
        dims[name] = shape[i]
    batch = 2 ** round(math.log2(max(1.0, target / per_sample)))
    batch = max(PROBE_BATCH, min(MAX_BATCH, batch))
    full = [batch] + list(shape[1:])
    while True:
        shapes = meta_run(steps, tuple(full), torch)
        per_tensor = [math.prod(s) * 4 for s in shapes]
        total = per_tensor[0] + per_tensor[-1] + _param_bytes(steps, shapes, torch)
        if batch <= PROBE_BATCH or (max(per_tensor) <= MAX_TENSOR_BYTES and total <= MAX_TOTAL_BYTES):
            break
        batch //= 2
        full[0] = batch
    if max(per_tensor) > MAX_TENSOR_BYTES or total > MAX_TOTAL_BYTES:
        raise ComposeError("too_large", "%s: %.3g GiB at batch %d (at most %.3g GiB a tensor, %.3g in all)" % (
            "-".join(s.op["canonical"] for s in steps), max(per_tensor) / 2**30, batch,
            MAX_TENSOR_BYTES / 2**30, MAX_TOTAL_BYTES / 2**30))
    if batch < MIN_BATCH:
        raise ComposeError("too_heavy_per_sample", "batch %d (under %d): the CPU stage's probe of %d samples "
                           "would be over 1/%d of the task" % (batch, MIN_BATCH, PROBE_BATCH, MIN_BATCH // PROBE_BATCH))
    est = estimate(steps, tuple(full), torch)
    est["target_ms"] = round(target, 3)
    return Task(seed, index, steps, dims, batch, shapes, est)


def _attr_names(steps):
    names, used = [], {}
    for s in steps:
        base = {"add": "bias", "sub": "offset", "mul": "scale", "matmul": "weight", "maximum": "floor"}.get(
            s.op["canonical"], s.op["canonical"]) if (s.op["kind"] != "module") else s.op["canonical"]
        used[base] = used.get(base, 0) + 1
        names.append(base if used[base] == 1 else "%s%d" % (base, used[base]))
    return names


def render(task, batch):
    """The task's KernelBench-format source with the batch at `batch`."""
    lines = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F"]
    mods = sorted({s.op["init"].split("(")[0].rsplit(".", 1)[0] for s in task.steps if s.op["source"] == "transformers"})
    lines += ["import %s" % m for m in mods]
    names = _attr_names(task.steps)
    init, forward = [], []
    for s, name, shape in zip(task.steps, names, task.shapes):
        v = s.values(shape)
        op = s.op
        if op["kind"] == "module":
            init.append("        self.%s = %s" % (name, op["init"].format(**v)))
            forward.append("        x = self.%s(x)" % name)
        else:
            if "param" in op:
                init.append("        self.%s = nn.Parameter(torch.randn%s)" % (
                    name, _tuple(op["param"].format(**v))))
                v["p"] = "self." + name
            forward.append("        x = %s" % op["call"].format(**v))
    what = ", then ".join(task.ops)
    lines += ["", "", "class Model(nn.Module):",
              '    """%s (anvil synth: seed %d, task %d)."""' % (what, task.seed, task.index), "",
              "    def __init__(self):", "        super().__init__()"]
    lines += init or []
    lines += ["", "    def forward(self, x):"] + forward + ["        return x", "", ""]
    lines.append("batch_size = %d" % batch)
    names_in = ["batch_size"]
    for name, value in task.dims.items():
        lines.append("%s = %d" % (name, value))
        names_in.append(name)
    lines += ["", "", "def get_inputs():", "    return [torch.randn(%s)]" % ", ".join(names_in), "", "",
              "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines)


def _tuple(text):
    """`(8, 1, 1)` as written for torch.randn's arguments (a 1-tuple keeps its comma)."""
    return text if text.startswith("(") else "(%s)" % text


def sequence_name(task):
    return "_".join(canonical(n) for n in task.ops)
