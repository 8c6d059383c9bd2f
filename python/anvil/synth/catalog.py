"""python -m anvil.synth.catalog [--out FILE]: the operator catalogue, crawled from the installed
torch and transformers (share/synth/operators.json is this module's output, committed).

The crawl enumerates torch.nn's module classes, torch.nn.functional's functions and torch's own
tensor functions (through torch.overrides' signature table), and transformers' activation and
RMS-norm layers. Each candidate gets a template from the names of its required arguments
(PARAM_RULES: `in_channels` is the input's channel count, `out_channels` a choice, ...) and is
then *run*: on a small input of each rank it may take, in every float dtype, twice under
different seeds and in training mode. An operator is kept when its template runs, it returns one
floating-point tensor whose shape does not depend on the input's values, it is finite on standard
normal inputs, and its output depends on its input (an identity, a view or a constant is not an
operator to write a kernel for). Every candidate left out is listed with its reason.

An entry: name (as a task writes it: `nn.Conv2d`, `F.gelu`, `torch.sum`), canonical (the name
decontamination and de-duplication compare: see canonical()), family, source, kind
(module|function), ranks (input ranks it runs on) with the output rank of each, init (modules:
the constructor expression) or call (functions: the call expression), params (the choices of
each free placeholder), dtypes, stochastic, standalone (transformers' layers: never composed, as
CUDA-Agent-Ops-6K's are not).

Placeholders in init and call: {c} the input's channel count (dim 1), {last} its last dim, {x}
the input; free ones ({c_out}, {f_out}, {k}, {pk}, {dim}, {pool_out}, {pad}, {groups}) are
chosen by the composer from `params` (groups: a divisor of {c}).
"""
import argparse
import datetime
import importlib
import inspect
import json
import os
import re
import sys
import warnings

VERSION = 1

# placeholder -> the choices a composer draws from (groups: the divisors of {c} among these)
CHOICES = {
    "c_out": [16, 32, 64, 96, 128, 256],
    "f_out": [128, 256, 512, 1024, 2048, 4096],
    "k": [1, 3, 5],
    "pk": [2, 3],
    "dim": [1, -1],
    "pool_out": [1, 2, 4, 8],
    "pad": [1, 2],
    "groups": [2, 4, 8, 16],
    "lrn": [3, 5],
    "scalar": [0.5, 1.5, 2.0],
    "lo": [-1.0, -0.5],
    "hi": [0.5, 1.0],
}

# a required constructor argument's name -> its placeholder ("kernel_size" of a pool is {pk})
PARAM_RULES = {
    "in_channels": "c", "num_features": "c", "num_channels": "c", "channels": "c",
    "out_channels": "c_out", "in_features": "last", "in1_features": "last", "out_features": "f_out",
    "normalized_shape": "last", "hidden_size": "last", "kernel_size": "k", "num_groups": "groups",
    "output_size": "pool_out", "padding": "pad", "size": "lrn", "dim": "dim",
}

# arguments a template sets although they have defaults (without them the op is ill-defined or
# degenerate: a softmax over an implicit dim, an upsample of no size)
EXTRA_ARGS = {
    "Softmax": "dim={dim}", "LogSoftmax": "dim={dim}", "Softmin": "dim={dim}", "GLU": "dim={dim}",
    "Upsample": "scale_factor=2", "ConstantPad1d": "value=0.5", "ConstantPad2d": "value=0.5",
    "ConstantPad3d": "value=0.5",
}

# functions whose `dim` has a default that is deprecated (an implicit choice), or whose default
# reduces the whole tensor, batch and all, to one value (a mean of millions of standard normal
# values is about 0, their std about 1: at a task's full size `anvil vet` finds the output tiny or
# input-independent): the template sets it
IMPLICIT_DIM = {"softmax", "softmin", "log_softmax", "sum", "mean", "amax", "amin", "max", "min", "prod", "std",
                "var", "nansum", "nanmean", "median", "nanmedian", "norm", "logsumexp"}

# module classes that are not one-input operators, with the reason (the rest are tried)
NOT_OPERATORS = {
    "Module": "a base class", "Container": "a container", "Sequential": "a container",
    "ModuleList": "a container", "ModuleDict": "a container", "ParameterList": "a container",
    "ParameterDict": "a container", "DataParallel": "a wrapper", "SyncBatchNorm": "needs a process group",
    "RNNBase": "a base class", "RNNCellBase": "a base class", "Identity": "the identity",
}

# Python's arithmetic and torch's two-operand functions with a learned or constant second operand,
# as KernelBench's fused tasks write them: (name, expression, parameter shape or None). {p} is the
# parameter (a module attribute in a task), {chan_shape} a per-channel shape that broadcasts.
EXPRESSIONS = (
    ("operator.add", "{x} + {p}", "{chan_shape}"),
    ("operator.sub", "{x} - {p}", "{chan_shape}"),
    ("operator.mul", "{x} * {p}", "{chan_shape}"),
    ("operator.mul", "{x} * {scalar}", None),
    ("operator.add", "{x} + {scalar}", None),
    ("operator.truediv", "{x} / {scalar}", None),
    ("torch.clamp", "torch.clamp({x}, min={lo}, max={hi})", None),
    ("torch.matmul", "torch.matmul({x}, {p})", "({last}, {f_out})"),
    ("torch.maximum", "torch.maximum({x}, {p})", "{chan_shape}"),
)

# small inputs of each rank the crawl runs templates on (channels 8, last dim 12: both divisible)
PROBE_SHAPES = {2: (4, 16), 3: (2, 8, 12), 4: (2, 8, 12, 12), 5: (2, 4, 6, 6, 6)}
DTYPES = ("float32", "float64", "float16", "bfloat16")

FAMILIES = (  # (family, pattern over the canonical name), first match wins
    ("attention", r"attention|sdpa"),
    ("convolution", r"^conv"),
    ("gemm", r"^(linear|bilinear|matmul|mm|bmm|addmm|baddbmm|einsum)$"),
    ("reduction", r"^(sum|mean|amax|amin|max|min|prod|logsumexp|std|var|nansum|nanmean|median|nanmedian|"
                  r"softmax|logsoftmax|softmin|softmax2d|cumsum|cumprod|logcumsumexp|cummax|cummin|norm)$"),
    ("normalization", r"norm"),
    ("pooling", r"pool"),
)


# spellings of one operation under different names (after lower-casing, without underscores)
CANONICAL_ALIASES = {
    "truediv": "div", "divide": "div", "multiply": "mul", "subtract": "sub", "absolute": "abs",
    "arctan": "atan", "arcsinh": "asinh", "arccos": "acos", "arcsin": "asin", "clip": "clamp",
    "negative": "neg", "fix": "trunc", "iadd": "add", "imul": "mul", "isub": "sub", "itruediv": "div",
    "swish": "silu", "sigmoidlinear": "silu", "amax": "max", "amin": "min",
}


def canonical(name):
    """The name decontamination and de-duplication compare: the last dotted part, lower-case,
    without underscores, aliases resolved (nn.ReLU, F.relu, torch.relu and x.relu() are all
    `relu`; operator.truediv and torch.divide are `div`)."""
    c = name.split("(")[0].rsplit(".", 1)[-1].lower().replace("_", "")
    return CANONICAL_ALIASES.get(c, c)


def family(name):
    c = canonical(name)
    for fam, pattern in FAMILIES:
        if re.search(pattern, c):
            return fam
    return "elementwise"


def ranks_for(cls_name):
    """The input ranks a module class may take, from its name (Conv2d: 4; Linear: 2-4)."""
    m = re.search(r"([123])d$", cls_name)
    if m:
        d = int(m.group(1))
        return [2, 3] if d == 1 and "Norm" in cls_name else [d + 2]
    return [2, 3, 4]


def fill(template, x, params):
    """`template` with the input's placeholders from `x` and the free ones from `params`."""
    values = dict(params)
    c = x.shape[1] if x.dim() > 1 else x.shape[0]
    values.update(c=c, last=x.shape[-1], x="x", chan_shape=chan_shape(c, x.dim()))
    values.setdefault("p", "p")
    return template.format(**values)


def chan_shape(c, rank):
    """A per-channel parameter's shape for an input of `rank` (channels at dim 1): (c, 1, 1) for 4."""
    return "(%d,)" % c if rank <= 2 else "(%d%s)" % (c, ", 1" * (rank - 2))


INPUT_PLACEHOLDERS = {"c", "last", "x", "p", "chan_shape"}


def free_placeholders(template):
    return set(re.findall(r"\{(\w+)\}", template)) - INPUT_PLACEHOLDERS


def first_choices(template, x):
    """The first valid choice of each free placeholder of `template` for input `x`."""
    out = {}
    for name in set(re.findall(r"\{(\w+)\}", template)) - INPUT_PLACEHOLDERS:
        if name == "groups":
            c = x.shape[1]
            divisors = [g for g in CHOICES["groups"] if c % g == 0]
            out[name] = divisors[0] if divisors else 1
        else:
            out[name] = CHOICES[name][0]
    return out


class Candidate:
    def __init__(self, name, source, kind, template, ranks, standalone=False, param=None):
        self.name, self.source, self.kind, self.template = name, source, kind, template
        self.ranks, self.standalone, self.param = ranks, standalone, param


def module_candidates(torch):
    """torch.nn's module classes with a template, and the ones left out with their reasons."""
    nn = torch.nn
    kept, left = [], []
    for cls_name in sorted(dir(nn)):
        cls = getattr(nn, cls_name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue
        name = "nn." + cls_name
        if cls_name in NOT_OPERATORS:
            left.append((name, NOT_OPERATORS[cls_name]))
            continue
        if cls_name.startswith("Lazy"):
            left.append((name, "a lazy module (its non-lazy class is crawled)"))
            continue
        if cls_name.endswith("Loss"):
            left.append((name, "a loss of two inputs"))
            continue
        template, why = module_template(cls, cls_name)
        if template is None:
            left.append((name, why))
            continue
        kept.append(Candidate(name, "torch.nn", "module", template, ranks_for(cls_name)))
    return kept, left


def module_template(cls, cls_name):
    """`nn.Name(args)` from the constructor's required arguments, or (None, why)."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError) as e:
        return None, "no signature: %s" % e
    args = []
    for p in list(sig.parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        rule = PARAM_RULES.get(p.name)
        if rule is None:
            return None, "no template for its required argument `%s`" % p.name
        if p.name == "kernel_size" and "Pool" in cls_name:
            rule = "pk"
        args.append("{%s}" % rule)
    if cls_name in EXTRA_ARGS:
        args.append(EXTRA_ARGS[cls_name])
    return "nn.%s(%s)" % (cls_name, ", ".join(args)), None


def function_candidates(torch):
    """torch.nn.functional's and torch's one-input functions (their required arguments `input`,
    or `input` and `dim`), by torch.overrides' table of signatures."""
    import torch.nn.functional as F

    table = torch.overrides.get_testing_overrides()
    kept, left = [], []
    spaces = (("F", F, "torch.nn.functional"), ("torch", torch, "torch"))
    for prefix, space, source in spaces:
        for fname in sorted(dir(space)):
            fn = getattr(space, fname)
            if fname.startswith("_") or fname.endswith("_") or not callable(fn) or isinstance(fn, type):
                continue
            if prefix == "torch" and getattr(F, fname, None) is not None:
                pass  # torch.relu and F.relu are both kept: two spellings of one canonical op
            lam = table.get(fn)
            if lam is None:
                continue  # not a tensor function torch's override table knows
            name = "%s.%s" % (prefix, fname)
            if fname.endswith("_like"):  # empty_like's values are whatever memory held: never compared
                left.append((name, "makes a new tensor of the input's shape: its values are not computed from it"))
                continue
            try:
                params = list(inspect.signature(lam).parameters.values())
            except (TypeError, ValueError):
                left.append((name, "no signature"))
                continue
            required = [p.name for p in params if p.default is p.empty and p.kind in (
                p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if not required or required[0] != "input" or any(r not in ("input", "dim") for r in required):
                left.append((name, "required arguments %s: not one input" % ",".join(required) if required
                             else "no required input"))
                continue
            has_dim = "dim" in required or (fname in IMPLICIT_DIM and "dim" in [p.name for p in params])
            call = "%s.%s({x}%s)" % (prefix, fname, ", dim={dim}" if has_dim else "")
            kept.append(Candidate(name, source, "function", call, [2, 3, 4]))
    return kept, left


TRANSFORMERS_NORMS = (  # (module, class): RMS norms of well-known models, hidden size their argument
    ("transformers.models.llama.modeling_llama", "LlamaRMSNorm"),
    ("transformers.models.mistral.modeling_mistral", "MistralRMSNorm"),
    ("transformers.models.qwen2.modeling_qwen2", "Qwen2RMSNorm"),
    ("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm"),
    ("transformers.models.t5.modeling_t5", "T5LayerNorm"),
)


def expression_candidates(torch):
    """EXPRESSIONS: arithmetic with a parameter or a constant (functions of one input and state)."""
    return [Candidate(name, "python" if name.startswith("operator.") else "torch", "function", expr, [2, 3, 4],
                      param=param) for name, expr, param in EXPRESSIONS], []


def transformers_candidates():
    """transformers' activation classes (ACT2CLS) and RMS norms; standalone tasks only."""
    kept, left = [], []
    try:
        from transformers import activations
    except ImportError as e:
        return kept, [("transformers", "not importable: %s" % e)]
    seen = set()
    for key, entry in sorted(activations.ACT2CLS.items()):
        cls = entry[0] if isinstance(entry, tuple) else entry
        kwargs = entry[1] if isinstance(entry, tuple) else {}
        name = "transformers.activations.%s" % cls.__name__
        if cls.__module__.startswith("torch."):
            left.append(("transformers:%s" % key, "torch's own %s (crawled as such)" % cls.__name__))
            continue
        if (name, tuple(sorted(kwargs.items()))) in seen:
            continue
        seen.add((name, tuple(sorted(kwargs.items()))))
        args = ", ".join("%s=%r" % kv for kv in sorted(kwargs.items()))
        kept.append(Candidate(name + ("(%s)" % args if args else ""), "transformers", "module",
                              "%s(%s)" % (name, args), [2, 3, 4], standalone=True))
    for module, cls_name in TRANSFORMERS_NORMS:
        name = "%s.%s" % (module, cls_name)
        try:
            getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError) as e:
            left.append((name, "not importable: %s" % e))
            continue
        kept.append(Candidate(name, "transformers", "module", "%s({last})" % name, [2, 3, 4], standalone=True))
    return kept, left


def build(candidate, x, torch):
    """A callable computing the candidate on inputs like `x`, with its first choices."""
    import torch.nn as nn  # noqa: F401 - templates name nn, F, torch, transformers
    import torch.nn.functional as F  # noqa: F401

    params = first_choices(candidate.template + (candidate.param or ""), x)
    expr = fill(candidate.template, x, params)
    scope = {"torch": torch, "nn": nn, "F": F}
    if candidate.source == "transformers":
        scope["transformers"] = importlib.import_module("transformers")
        importlib.import_module(expr.split("(")[0].rsplit(".", 1)[0])
    if candidate.kind == "module":
        module = eval(expr, scope)  # noqa: S307 - the crawl's own templates
        return module, lambda t: module(t)
    if candidate.param is not None:
        scope["p"] = torch.randn(*eval(fill(candidate.param, x, params)), dtype=x.dtype)  # noqa: S307
    return None, eval("lambda x: " + expr, scope)  # noqa: S307


def examine(candidate, torch):
    """The entry for `candidate` after running it, or (None, reason)."""
    out_ranks, why_not = {}, None
    for rank in candidate.ranks:
        torch.manual_seed(0)
        x = torch.randn(*PROBE_SHAPES[rank])
        try:
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                module, f = build(candidate, x, torch)
                if module is not None:
                    module.eval()
                with torch.no_grad():
                    y = f(x)
                    problem = output_problem(x, y, f, torch)
        except Exception as e:  # noqa: BLE001 - the op's own failure is the answer
            why_not = why_not or "does not run on a rank-%d input: %s" % (rank, str(e).splitlines()[0][:160] if str(e) else type(e).__name__)
            continue
        if warned and not problem:  # deprecated, or the input read another way (unbatched)
            message = str(warned[0].message).splitlines()[0][:160]
            if "deprecat" in message.lower():  # the op, not the rank
                return None, "deprecated: %s" % message
            problem = "warns on a rank-%d input: %s" % (rank, message)
        iterative = None if problem else iterative_decomposition(f, x, torch)
        if iterative:  # the op, not the rank
            return None, iterative
        if problem:
            why_not = problem
            continue
        out_ranks[str(rank)] = y.dim()
    if not out_ranks:
        return None, why_not
    rank = int(next(iter(out_ranks)))
    return {
        "name": candidate.name, "canonical": canonical(candidate.name.split("(")[0]),
        "family": family(candidate.name.split("(")[0]), "source": candidate.source, "kind": candidate.kind,
        ("init" if candidate.kind == "module" else "call"): candidate.template,
        **({"param": candidate.param} if candidate.param else {}),
        "params": {p: CHOICES[p] for p in sorted(free_placeholders(candidate.template + (candidate.param or "")))},
        "ranks": out_ranks, "dtypes": dtypes(candidate, rank, torch),
        "stochastic": stochastic(candidate, rank, torch), "standalone": candidate.standalone,
    }, None


# aten's iterative matrix decompositions: no FLOP formula, and on the GPU a time that depends on
# convergence (torch.pinverse's SVD: 1-31 s at a task's full size for 2-12 ms estimated; the GPU
# stage accepted 0 of 13 such tasks: bench/results/synth-2026-12-02-catalogue190.md)
ITERATIVE = ("linalg_pinv", "_linalg_svd", "linalg_svd", "linalg_svdvals", "svd", "_linalg_eigh", "linalg_eigh",
             "linalg_eig", "linalg_eigvals", "linalg_eigvalsh")


def iterative_decomposition(f, x, torch):
    """Why `f` is out as an iterative decomposition (an SVD, an eigensolver), or None."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Calls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func._schema.name.split("::")[-1])
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Calls():
        f(x)
    hit = next((name for name in seen if name in ITERATIVE), None)
    if hit is None:
        return None
    return ("runs an iterative matrix decomposition (aten.%s): its GPU time depends on convergence, "
            "beyond the CPU stage's FLOP/byte estimate" % hit)


def output_problem(x, y, f, torch):
    """Why the output `y` of `f` on `x` is not an operator's output, or None."""
    if not isinstance(y, torch.Tensor):
        return "returns %s, not one tensor" % type(y).__name__
    if not y.is_floating_point():
        return "returns a %s tensor, not a floating-point one" % str(y.dtype).replace("torch.", "")
    if y.numel() == 0:
        return "returns an empty tensor"
    if y.data_ptr() == x.data_ptr() or (y.shape == x.shape and torch.equal(y, x)):
        return "returns its input (a view or the identity)"
    if not torch.isfinite(y).all():
        return "not finite on standard normal inputs"
    x2 = torch.randn(x.shape, generator=torch.Generator().manual_seed(7)) * 3
    y2 = f(x2)
    if not isinstance(y2, torch.Tensor) or y2.shape != y.shape:
        return "its output's shape depends on the input's values"
    y3 = f(torch.round(x * 2) / 2)  # values that repeat (unique() of continuous noise has none)
    if not isinstance(y3, torch.Tensor) or y3.shape != y.shape:
        return "its output's shape depends on the input's values"
    if torch.equal(y2, y):
        return "its output does not depend on its input"
    if y.dim() == 0:
        return "it reduces the whole batch to one value (it mixes the samples of a batch)"
    if y.dim() > 0:  # the batch: dim 0 kept, each sample computed alone (a task's batch is its size)
        n = x.shape[0]
        xb = torch.randn((2 * n,) + tuple(x.shape[1:]), generator=torch.Generator().manual_seed(9))
        yb = f(xb)
        if not isinstance(yb, torch.Tensor) or y.shape[0] != n or tuple(yb.shape) != (2 * n,) + tuple(y.shape[1:]):
            return "its output's dim 0 is not the input's batch"
        alone = f(xb[:n])
        random_op = not torch.equal(alone, f(xb[:n]))  # dropout: stochastic() marks it, not this
        if not random_op and not torch.allclose(yb[:n], alone, atol=1e-5, rtol=1e-5, equal_nan=True):
            return "it mixes the samples of a batch"
    return None


def dtypes(candidate, rank, torch):
    ok = []
    for name in DTYPES:
        dtype = getattr(torch, name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x = torch.randn(*PROBE_SHAPES[rank]).to(dtype)
                module, f = build(candidate, x, torch)
                if module is not None:
                    module.to(dtype).eval()
                with torch.no_grad():
                    y = f(x)
            if isinstance(y, torch.Tensor) and y.dtype == dtype:
                ok.append(name)
        except Exception:  # noqa: BLE001 - not supported in this dtype (on this machine's CPU)
            continue
    return ok


def stochastic(candidate, rank, torch):
    """Whether two runs on one input, seeded differently, differ (in eval or in training mode)."""
    x = torch.randn(*PROBE_SHAPES[rank], generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module, f = build(candidate, x, torch)
        for train in (False, True):
            if module is not None:
                module.train(train)
            elif train:
                break
            outs = []
            for seed in (1, 2):
                torch.manual_seed(seed)
                with torch.no_grad():
                    outs.append(f(x))
            if not torch.equal(outs[0], outs[1]):
                return True
    return False


def crawl():
    import torch

    torch.set_num_threads(1)
    # torch's own deprecation warnings are once a process (TORCH_WARN_ONCE): an op crawled after
    # another that raised the same one would otherwise pass silently, the crawl's order deciding
    torch.set_warn_always(True)
    candidates, excluded = [], []
    for gather in (module_candidates, function_candidates, expression_candidates):
        kept, left = gather(torch)
        candidates += kept
        excluded += left
    kept, left = transformers_candidates()
    candidates += kept
    excluded += left
    ops = []
    for c in candidates:
        entry, why = examine(c, torch)
        if entry is None:
            excluded.append((c.name, why))
        else:
            ops.append(entry)
    versions = {"torch": torch.__version__}
    try:
        import transformers

        versions["transformers"] = transformers.__version__
    except ImportError:
        pass
    return {
        "version": VERSION, "generator": "python -m anvil.synth.catalog", "versions": versions,
        "crawled_on": datetime.date.today().isoformat(), "probe_shapes": {str(k): v for k, v in PROBE_SHAPES.items()},
        "choices": CHOICES, "operators": ops,
        "excluded": [{"name": n, "reason": r} for n, r in sorted(excluded)],
    }


def default_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "share", "synth",
                        "operators.json")


def load(path=None):
    """The catalogue at `path` (default: the committed one), checked for its version."""
    path = path or os.path.normpath(default_path())
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if data.get("version") != VERSION:
        raise ValueError("%s: catalogue version %r, this anvil reads version %d (regenerate it with "
                         "python -m anvil.synth.catalog)" % (path, data.get("version"), VERSION))
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.synth.catalog", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.normpath(default_path()), help="where to write (default: %(default)s)")
    args = ap.parse_args(argv)
    data = crawl()
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, args.out)
    fams = {}
    for op in data["operators"]:
        fams[op["family"]] = fams.get(op["family"], 0) + 1
    print("%d operators (%s), %d left out: %s" % (len(data["operators"]), ", ".join(
        "%s %d" % kv for kv in sorted(fams.items())), len(data["excluded"]), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
