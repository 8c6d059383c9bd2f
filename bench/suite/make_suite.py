#!/usr/bin/env python3
"""make_suite.py: a benchmark suite in KernelBench layout (tasks + CUDA and CPU solutions) for `anvil bench`.

    python3 bench/suite/make_suite.py --out DIR [--tasks 100] [--faults] [--seed 0] [--force]

writes, deterministically (the same arguments give byte-identical trees):

    DIR/tasks/level1/<id>_<Name>.py            single ops (elementwise, row reductions and norms)
    DIR/tasks/level2/<id>_<Name>.py            fused chains of 2-5 ops (Linear + epilogue, ...)
    DIR/solutions/<level>/<id>_<Name>/cuda/    model_new.py, kernels/*.cu (+ host .cpp), *_binding.cpp
    DIR/solutions/<level>/<id>_<Name>/cpu/     model_new.py, kernels/*.cpp (std::thread rows), *_binding.cpp
    DIR/manifest.json                          every task: level, id, name, family, ops, shapes, fault

Every solution's kernel source is generated for its task (op chain and constants baked in); the
bindings are fast mode (<anvil/binding.h>). With --faults a few entries are broken on purpose so
that a report shows every outcome (see FAULTS below); the broken ones are printed and listed in the
manifest. Standard library only; nothing here imports torch.
"""
import argparse
import json
import os
import random
import shutil
import sys
import time

SCHEMA = "anvil.bench-suite/1"
LEVEL1_SHARE = 0.6

# --------------------------------------------------------------------------------------------------
# Ops
# --------------------------------------------------------------------------------------------------

UNARY = ("relu", "leaky_relu", "gelu", "sigmoid", "tanh", "silu", "hardtanh", "clamp", "scale")
BINARY = ("add_input", "mul_input", "bias")
ROW = ("softmax", "log_softmax", "sum", "mean", "max", "layernorm", "rmsnorm")
REDUCE = ("sum", "mean", "max")  # rows -> one value each
CHAIN_POOL = UNARY + BINARY  # what an epilogue / level-2 chain draws from

TITLE = {
    "relu": "ReLU", "leaky_relu": "LeakyReLU", "gelu": "GELU", "sigmoid": "Sigmoid", "tanh": "Tanh",
    "silu": "SiLU", "hardtanh": "Hardtanh", "clamp": "Clamp", "scale": "Scale", "bias": "BiasAdd",
    "add_input": "ResidualAdd", "mul_input": "Multiply", "lbias": "LinearBias",
    "softmax": "Softmax", "log_softmax": "LogSoftmax", "sum": "Sum", "mean": "Mean", "max": "Max",
    "layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "gemm": "Gemm",
}
LEVEL1_TITLE = dict(TITLE, add_input="Add")

SLOPES = (0.01, 0.05, 0.1, 0.2)
SCALES = (0.5, 1.5, 2.0, 0.25, 3.0, 0.75)
CLIPS = ((-1.0, 1.0), (-0.5, 0.5), (-2.0, 2.0), (-0.25, 1.0), (0.0, 6.0), (-1.5, 0.5))
EPSILONS = (1e-5, 1e-6)

ELEMS = (1 << 21, 1 << 22, 1 << 23)  # 2M-8M fp32 elements: 8-32 MB per tensor
EW_COLS = (256, 512, 1024, 2048, 4096, 8192, 16384, 1000, 1023, 3000, 4095)
HIDDEN_3D = (768, 1024, 2048, 4096)
ROW_COLS = {
    "softmax": (1024, 2048, 4096, 8192, 16384, 32768, 1000, 2047, 5000),
    "log_softmax": (1024, 2048, 4096, 8192, 16384, 1000, 2047, 5000),
    "sum": (256, 1024, 4096, 8192, 16384, 32768, 1023, 3000),
    "mean": (256, 1024, 2048, 4096, 8192, 1023, 3000),
    "max": (256, 1024, 4096, 8192, 16384, 32768, 1023, 3000),
}
NORM_HIDDEN = (512, 768, 1024, 2048, 4096, 5120, 8192, 1000, 2050)
GEMM_M = (128, 256, 512, 1024, 2048)
GEMM_K = (256, 512, 768, 1024)
GEMM_N = (256, 512, 768, 1000, 1024)


def sample_op(kind, rng):
    op = {"kind": kind}
    if kind == "leaky_relu":
        op["negative_slope"] = rng.choice(SLOPES)
    elif kind in ("hardtanh", "clamp"):
        op["min"], op["max"] = rng.choice(CLIPS)
    elif kind == "scale":
        op["factor"] = rng.choice(SCALES)
    return op


def sample_chain(rng, lo, hi, allow_input=True):
    n = rng.randint(lo, hi)
    kinds = []
    while len(kinds) < n:
        k = rng.choice(CHAIN_POOL)
        if k in kinds:
            continue
        if k in ("hardtanh", "clamp") and ("hardtanh" in kinds or "clamp" in kinds):
            continue
        if k in ("add_input", "mul_input") and (not allow_input or "add_input" in kinds or "mul_input" in kinds):
            continue
        kinds.append(k)
    return [sample_op(k, rng) for k in kinds]


def has_input(chain):
    return any(op["kind"] in ("add_input", "mul_input") for op in chain)


def has_bias(chain):
    return any(op["kind"] == "bias" for op in chain)


# --------------------------------------------------------------------------------------------------
# Task descriptions
# --------------------------------------------------------------------------------------------------


def shape_name(shape):
    return "x".join(str(d) for d in shape)


def sample_ew_shape(rng):
    e = rng.choice(ELEMS)
    if rng.random() < 0.3:
        h, b = rng.choice(HIDDEN_3D), rng.choice((8, 16, 32))
        return [b, max(1, e // (b * h)), h]
    cols = rng.choice(EW_COLS)
    return [max(16, e // cols), cols]


def sample_row_shape(kind, rng):
    e = rng.choice(ELEMS)
    if kind in ("layernorm", "rmsnorm"):
        h = rng.choice(NORM_HIDDEN)
        if rng.random() < 0.5:
            b = rng.choice((4, 8, 16, 32))
            return [b, max(1, e // (b * h)), h]
        return [max(64, e // h), h]
    cols = rng.choice(ROW_COLS[kind])
    return [max(64, e // cols), cols]


def sample_gemm(rng):
    while True:
        m, k, n = rng.choice(GEMM_M), rng.choice(GEMM_K), rng.choice(GEMM_N)
        if (1 << 24) <= m * n * k <= (1 << 30):
            return m, k, n


def new_level1(kind, rng):
    if kind in UNARY or kind in BINARY:
        family = "elementwise_unary" if kind in UNARY else "elementwise_binary"
        shape = sample_ew_shape(rng)
        t = {"family": family, "core": "ew", "chain": [sample_op(kind, rng)], "shape": shape}
    else:
        family = {"sum": "row_reduction", "mean": "row_reduction", "max": "row_reduction",
                  "softmax": "row_softmax", "log_softmax": "row_softmax",
                  "layernorm": "row_norm", "rmsnorm": "row_norm"}[kind]
        t = {"family": family, "core": kind, "chain": [], "shape": sample_row_shape(kind, rng)}
        if kind in ("layernorm", "rmsnorm"):
            t["eps"] = rng.choice(EPSILONS)
    t["name"] = "%s_%s" % (LEVEL1_TITLE[kind], shape_name(t["shape"]))
    return t


def new_level2(family, rng):
    if family == "gemm_epilogue":
        m, k, n = sample_gemm(rng)
        t = {"family": family, "core": "gemm", "chain": sample_chain(rng, 1, 4), "shape": [m, k], "out_features": n}
        t["name"] = "_".join(["Gemm"] + [TITLE[op["kind"]] for op in t["chain"]])
    elif family == "elementwise_chain":
        t = {"family": family, "core": "ew", "chain": sample_chain(rng, 2, 5), "shape": sample_ew_shape(rng)}
        t["name"] = "_".join(TITLE[op["kind"]] for op in t["chain"])
    else:  # row_epilogue: a softmax or norm, then 1-3 elementwise ops
        core = rng.choice(("softmax", "log_softmax", "layernorm", "rmsnorm"))
        t = {"family": family, "core": core, "chain": sample_chain(rng, 1, 3), "shape": sample_row_shape(core, rng)}
        if core in ("layernorm", "rmsnorm"):
            t["eps"] = rng.choice(EPSILONS)
        t["name"] = "_".join([TITLE[core]] + [TITLE[op["kind"]] for op in t["chain"]])
    return t


def largest_remainder(shares, n):
    """A sequence of n keys, each prefix as close to `shares` as possible (deterministic)."""
    total = float(sum(shares.values()))
    shares = {k: v / total for k, v in shares.items()}
    counts = {k: 0 for k in shares}
    out = []
    for i in range(n):
        key = max(shares, key=lambda k: (shares[k] * (i + 1) - counts[k], shares[k]))
        counts[key] += 1
        out.append(key)
    return out


def plan(n_tasks, seed):
    """The task descriptions, in id order per level."""
    rng = random.Random(seed)
    n1 = max(1, min(n_tasks - 1, int(round(n_tasks * LEVEL1_SHARE))))
    n2 = n_tasks - n1
    # Level 1: rounds over all kinds; each round interleaves unary, binary and row kinds in proportion.
    kinds = []
    while len(kinds) < n1:
        groups = {"u": list(UNARY), "b": list(BINARY), "r": list(ROW)}
        for g in groups.values():
            rng.shuffle(g)
        for key in largest_remainder({k: len(v) for k, v in groups.items()}, len(UNARY) + len(BINARY) + len(ROW)):
            kinds.append(groups[key].pop(0))
    tasks = []
    used = set()
    for i, kind in enumerate(kinds[:n1]):
        for _ in range(1000):
            t = new_level1(kind, rng)
            if t["name"] not in used:
                break
        else:
            raise SystemExit("make_suite: could not draw a distinct level1 task for %s" % kind)
        used.add(t["name"])
        t.update(level="level1", id=i + 1)
        tasks.append(t)
    used = set()
    families = largest_remainder({"gemm_epilogue": 0.45, "elementwise_chain": 0.30, "row_epilogue": 0.25}, n2)
    for i, family in enumerate(families):
        for _ in range(1000):
            t = new_level2(family, rng)
            if t["name"] not in used:
                break
        else:
            raise SystemExit("make_suite: could not draw a distinct level2 task for %s" % family)
        used.add(t["name"])
        t.update(level="level2", id=i + 1)
        tasks.append(t)
    for t in tasks:
        t["stem"] = "%d_%s" % (t["id"], t["name"])
        t["fn"] = fn_name(t)
    return tasks


def fn_name(t):
    """The extension function's name: the op chain, lower case."""
    parts = [t["core"]] if t["core"] not in ("ew",) else []
    parts += [op["kind"] for op in t["chain"]]
    name = "_".join(parts)
    return ("fused_" if t["level"] == "level2" else "") + name + "_forward"


def out_shape(t):
    if t["core"] == "gemm":
        return [t["shape"][0], t["out_features"]]
    if t["core"] in REDUCE:
        return t["shape"][:-1]
    return list(t["shape"])


def inputs(t):
    """(name, shape) of forward's tensors."""
    ins = [("x", list(t["shape"]))]
    if has_input(t["chain"]):
        ins.append(("y", out_shape(t)))
    return ins


def params(t):
    """(attribute path, C name, shape) of the module's tensors the kernels need, in call order."""
    ps = []
    cols = out_shape(t)[-1] if t["core"] not in REDUCE else t["shape"][-1]
    if t["core"] == "gemm":
        ps += [("self.linear.weight", "weight", [t["out_features"], t["shape"][1]]),
               ("self.linear.bias", "lin_bias", [t["out_features"]])]
    elif t["core"] == "layernorm":
        ps += [("self.norm.weight", "gamma", [cols]), ("self.norm.bias", "beta", [cols])]
    elif t["core"] == "rmsnorm":
        ps += [("self.weight", "weight", [cols])]
    if has_bias(t["chain"]):
        ps.append(("self.bias", "bias", [out_shape(t)[-1]]))
    return ps


def dim_names(t):
    """Module-level constant names for x's dimensions."""
    if t["core"] == "gemm":
        return ["BATCH", "IN_FEATURES"]
    return ["BATCH", "SEQ", "DIM"] if len(t["shape"]) == 3 else ["BATCH", "DIM"]


def init_args(t):
    """(argument, CONSTANT, value) of Model.__init__, in order."""
    args = []
    dims = dict(zip(dim_names(t), t["shape"]))
    if t["core"] == "gemm":
        args += [("in_features", "IN_FEATURES", t["shape"][1]), ("out_features", "OUT_FEATURES", t["out_features"])]
    elif t["core"] in ("layernorm", "rmsnorm"):
        args += [("hidden", "DIM", dims["DIM"]), ("eps", "EPS", t["eps"])]
    elif has_bias(t["chain"]):
        args += [("num_features", "DIM", dims["DIM"])]
    for op in t["chain"]:
        k = op["kind"]
        if k == "leaky_relu":
            args.append(("negative_slope", "NEGATIVE_SLOPE", op["negative_slope"]))
        elif k == "hardtanh":
            args += [("min_val", "HARDTANH_MIN", op["min"]), ("max_val", "HARDTANH_MAX", op["max"])]
        elif k == "clamp":
            args += [("clamp_min", "CLAMP_MIN", op["min"]), ("clamp_max", "CLAMP_MAX", op["max"])]
        elif k == "scale":
            args.append(("scale_factor", "SCALE_FACTOR", op["factor"]))
    return args


def expr(t):
    """The computation as one readable formula."""
    core = t["core"]
    if core == "gemm":
        e = "linear(x)"
    elif core == "ew":
        e = "x"
    elif core in REDUCE:
        e = "%s(x, dim=-1)" % core
    else:
        e = "%s(x)" % core
    for op in t["chain"]:
        k = op["kind"]
        if k in ("scale", "mul_input") and " + " in e and not e.endswith(")"):
            e = "(%s)" % e
        elif k in ("scale", "mul_input") and " + " in e:
            depth, top = 0, False
            for ch in e:
                depth += ch == "("
                depth -= ch == ")"
                top = top or (depth == 0 and ch == "+")
            e = "(%s)" % e if top else e
        if k == "scale":
            e = "%s * %r" % (e, op["factor"])
        elif k == "bias":
            e = "%s + bias" % e
        elif k == "add_input":
            e = "%s + y" % e
        elif k == "mul_input":
            e = "%s * y" % e
        elif k == "leaky_relu":
            e = "leaky_relu(%s, %r)" % (e, op["negative_slope"])
        elif k in ("hardtanh", "clamp"):
            e = "%s(%s, %r, %r)" % (k, e, op["min"], op["max"])
        else:
            e = "%s(%s)" % (k, e)
    return e


def ops_list(t):
    return ([t["core"]] if t["core"] != "ew" else []) + [op["kind"] for op in t["chain"]]


def eager_estimate(t):
    """Rough bytes moved and flops of the eager reference (one kernel per op, fp32)."""
    n_in = 1
    for d in t["shape"]:
        n_in *= d
    n_out = 1
    for d in out_shape(t):
        n_out *= d
    nbytes, flops = 0, 0
    if t["core"] == "gemm":
        m, k = t["shape"]
        n = t["out_features"]
        nbytes += 4 * (m * k + n * k + m * n + n)
        flops += 2 * m * n * k
    elif t["core"] in REDUCE:
        nbytes += 4 * (n_in + n_out)
    elif t["core"] != "ew":
        nbytes += 4 * (2 * n_in + n_out)  # statistics pass + normalize pass (often one kernel)
    for i, op in enumerate(t["chain"]):
        n = n_in if (t["core"] == "ew" and i == 0) else n_out
        nbytes += 4 * (n + n_out) + (4 * n_out if op["kind"] in ("add_input", "mul_input") else 0)
    return {"bytes": nbytes, "flops": flops}


# --------------------------------------------------------------------------------------------------
# Task files (KernelBench format)
# --------------------------------------------------------------------------------------------------


def py_forward_line(op):
    k = op["kind"]
    return {
        "relu": "x = torch.relu(x)",
        "leaky_relu": "x = F.leaky_relu(x, negative_slope=self.negative_slope)",
        "gelu": "x = F.gelu(x)",
        "sigmoid": "x = torch.sigmoid(x)",
        "tanh": "x = torch.tanh(x)",
        "silu": "x = F.silu(x)",
        "hardtanh": "x = F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)",
        "clamp": "x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)",
        "scale": "x = x * self.scale_factor",
        "bias": "x = x + self.bias",
        "add_input": "x = x + y",
        "mul_input": "x = x * y",
    }[k]


# The reference's first line for a task's core op (elementwise chains have none).
CORE_FORWARD = {
    "gemm": "self.linear(x)",
    "softmax": "torch.softmax(x, dim=-1)",
    "log_softmax": "torch.log_softmax(x, dim=-1)",
    "sum": "torch.sum(x, dim=-1)",
    "mean": "torch.mean(x, dim=-1)",
    "max": "torch.amax(x, dim=-1)",
    "layernorm": "self.norm(x)",
    "rmsnorm": "x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight",
}


def render_task(t, seed):
    dims = dim_names(t)
    consts = list(zip(dims, t["shape"]))
    for _, const, value in init_args(t):
        if const not in dict(consts):
            consts.append((const, value))
    if t["core"] == "gemm":
        consts.insert(2, ("OUT_FEATURES", t["out_features"]))
    ins = inputs(t)
    shape_of = {"x": ", ".join(dims)}
    if len(ins) > 1:
        shape_of["y"] = ", ".join(dims[:-1] + ["OUT_FEATURES"]) if t["core"] == "gemm" else shape_of["x"]
    args = init_args(t)
    lines = []
    lines.append("# %s: out = %s, fp32." % (t["stem"], expr(t)))
    lines.append("# x: (%s) -> (%s). Generated by bench/suite/make_suite.py (seed %d); family %s."
                 % (", ".join(str(d) for d in t["shape"]), ", ".join(str(d) for d in out_shape(t)), seed, t["family"]))
    lines += ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    seen = set()
    for name, value in consts:
        if name in seen:
            continue
        seen.add(name)
        lines.append("%s = %r" % (name, value))
    lines += ["", ""]
    lines.append("class Model(nn.Module):")
    lines.append("    def __init__(self%s):" % "".join(", " + a for a, _, _ in args))
    lines.append("        super().__init__()")
    for a, _, _ in args:
        if a in ("in_features", "out_features", "num_features"):
            continue
        if a in ("hidden",) or (a == "eps" and t["core"] == "layernorm"):
            continue
        lines.append("        self.%s = %s" % (a, a))
    core = t["core"]
    bias_dim = "out_features" if core == "gemm" else ("hidden" if core in ("layernorm", "rmsnorm") else "num_features")
    if core == "gemm":
        lines.append("        self.linear = nn.Linear(in_features, out_features)")
    elif core == "layernorm":
        lines.append("        self.norm = nn.LayerNorm(hidden, eps=eps)")
        lines.append("        with torch.no_grad():  # away from the (1, 0) defaults, so ignoring them is caught")
        lines.append("            self.norm.weight.normal_(1.0, 0.2)")
        lines.append("            self.norm.bias.normal_(0.0, 0.2)")
    elif core == "rmsnorm":
        lines.append("        self.weight = nn.Parameter(torch.randn(hidden) * 0.2 + 1.0)")
    if has_bias(t["chain"]):
        lines.append("        self.bias = nn.Parameter(torch.randn(%s) * %s)" % (bias_dim, "0.1" if core == "gemm" else "0.5"))
    lines.append("")
    sig = ", ".join(n for n, _ in ins)
    lines.append("    def forward(self, %s):  # %s" % (sig, "; ".join("%s: (%s)" % (n, shape_of[n]) for n, _ in ins)))
    if core in CORE_FORWARD:
        lines.append("        x = " + CORE_FORWARD[core])
    for op in t["chain"]:
        lines.append("        " + py_forward_line(op))
    lines.append("        return x")
    lines += ["", ""]
    scale = {"softmax": " * 3.0", "log_softmax": " * 3.0", "layernorm": " * 2.0 + 0.5", "rmsnorm": " * 1.5 + 0.25"}.get(core, "")
    gi = ["torch.randn(%s)%s" % (shape_of["x"], scale)]
    if len(ins) > 1:
        gi.append("torch.randn(%s)" % shape_of["y"])
    lines.append("def get_inputs():")
    lines.append("    return [%s]" % ", ".join(gi))
    lines += ["", ""]
    lines.append("def get_init_inputs():")
    lines.append("    return [%s]" % ", ".join(c for _, c, _ in args))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# model_new.py
# --------------------------------------------------------------------------------------------------


def render_model_new(t, variant):
    args = init_args(t)
    core = t["core"]
    how = {"cuda": "generated CUDA kernels" + (" (cuBLAS fp32 GEMM + one fused epilogue pass)" if core == "gemm" else
                                              " (one fused pass)"),
           "cpu": "generated C++ kernels on the CPU, rows split over std::threads"}[variant]
    lines = ["import torch", "import torch.nn as nn", "", "import cuda_extension", "", ""]
    lines.append("class ModelNew(nn.Module):")
    lines.append('    """out = %s: %s."""' % (expr(t), how))
    lines.append("")
    lines.append("    def __init__(self%s):" % "".join(", " + a for a, _, _ in args))
    lines.append("        super().__init__()")
    baked = [a for a, _, _ in args if a not in ("in_features", "out_features", "num_features", "hidden")
             and not (a == "eps" and core == "layernorm")]
    for a in baked:
        lines.append("        self.%s = %s  # baked into the kernel" % (a, a))
    bias_dim = "out_features" if core == "gemm" else ("hidden" if core in ("layernorm", "rmsnorm") else "num_features")
    if core == "gemm":
        lines.append("        self.linear = nn.Linear(in_features, out_features)  # holds weight and bias; never called")
    elif core == "layernorm":
        lines.append("        self.norm = nn.LayerNorm(hidden, eps=eps)  # holds weight and bias; never called")
    elif core == "rmsnorm":
        lines.append("        self.weight = nn.Parameter(torch.empty(hidden))")
    if has_bias(t["chain"]):
        lines.append("        self.bias = nn.Parameter(torch.empty(%s))" % bias_dim)
    lines.append("")
    ins = inputs(t)
    lines.append("    def forward(self, %s):" % ", ".join(n for n, _ in ins))
    call = ["%s.contiguous()" % n for n, _ in ins] + [p for p, _, _ in params(t)]
    lines.append("        return cuda_extension.%s(%s)" % (t["fn"], ", ".join(call)))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# C++ / CUDA sources
# --------------------------------------------------------------------------------------------------


def cf(v):
    """A float literal for C: the same float32 value PyTorch uses for the Python scalar."""
    s = repr(float(v))
    return s + "f"


def c_op(op, cuda):
    k = op["kind"]
    if k == "relu":
        return "t = %s(t, 0.0f);" % ("fmaxf" if cuda else "std::max")
    if k == "leaky_relu":
        return "t = t > 0.0f ? t : t * %s;" % cf(op["negative_slope"])
    if k == "gelu":
        return "t = 0.5f * t * (1.0f + %s(t * 0.70710678118654752f));  // exact (erf) GELU" % ("erff" if cuda else "std::erf")
    if k == "sigmoid":
        return "t = 1.0f / (1.0f + %s(-t));" % ("expf" if cuda else "std::exp")
    if k == "tanh":
        return "t = %s(t);" % ("tanh_precise" if cuda else "std::tanh")
    if k == "silu":
        return "t = t / (1.0f + %s(-t));" % ("expf" if cuda else "std::exp")
    if k in ("hardtanh", "clamp"):
        if cuda:
            return "t = fminf(fmaxf(t, %s), %s);" % (cf(op["min"]), cf(op["max"]))
        return "t = std::min(std::max(t, %s), %s);" % (cf(op["min"]), cf(op["max"]))
    if k == "scale":
        return "t = t * %s;" % cf(op["factor"])
    if k in ("bias", "lbias"):
        ptr = "bias" if k == "bias" else "lin_bias"
        return "t = t + %s;" % ("__ldg(%s + c)" % ptr if cuda else "%s[c]" % ptr)
    if k == "add_input":
        return "t = t + u;"
    if k == "mul_input":
        return "t = t * u;"
    raise ValueError(k)


def chain_ptrs(chain):
    return [("bias" if op["kind"] == "bias" else "lin_bias") for op in chain if op["kind"] in ("bias", "lbias")]


def epilogue_fn(chain, cuda):
    """The per-element epilogue function, or None for an empty chain."""
    if not chain:
        return None
    args = ["float t", "int64_t c"] + ["const float* __restrict__ %s" % p for p in chain_ptrs(chain)]
    if has_input(chain):
        args.append("float u")
    qual = "__device__ __forceinline__ float" if cuda else "inline float"
    lines = ["// t -> %s, one element at column c." % " -> ".join(TITLE[op["kind"]] for op in chain),
             "%s epilogue(%s) {" % (qual, ", ".join(args))]
    if not any(op["kind"] in ("bias", "lbias") for op in chain):
        lines.append("  (void)c;")
    for op in chain:
        lines.append("  " + c_op(op, cuda))
    lines += ["  return t;", "}"]
    return "\n".join(lines)


def epi_call(chain, val, col, uval, store):
    if not chain:
        return store(val)
    args = [val, col] + chain_ptrs(chain)
    if has_input(chain):
        args.append(uval)
    return store("epilogue(%s)" % ", ".join(args))


TANH_HELPER = """// tanh to about 1 ulp. nvcc's --use_fast_math turns tanhf into tanh.approx (relative error
// ~2^-11), too coarse for fp32 tolerances; this form only needs expf of a non-positive argument.
__device__ __forceinline__ float tanh_precise(float t) {
  const float a = fabsf(t);
  if (a < 0.125f) {  // odd Taylor series; the next term is below 1e-9 here
    const float s = t * t;
    return t + t * s * (-0.33333333f + s * (0.13333333f + s * -0.053968254f));
  }
  const float e = expf(-2.0f * a);
  return copysignf((1.0f - e) / (1.0f + e), t);
}
"""

PARALLEL_H = """// parallel_rows.h: run fn(begin, end) over [0, rows), one contiguous block of rows per hardware
// thread (std::thread), the calling thread taking the first block. Blocks hold at least min_rows rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

template <class Fn>
void parallel_rows(int64_t rows, int64_t min_rows, Fn fn) {
  const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(hw, rows / std::max<int64_t>(1, min_rows)));
  if (workers == 1) {
    fn(int64_t{0}, rows);
    return;
  }
  const int64_t per = (rows + workers - 1) / workers;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) {
    const int64_t begin = std::min(rows, w * per), end = std::min(rows, begin + per);
    if (begin < end) pool.emplace_back([=] { fn(begin, end); });
  }
  fn(int64_t{0}, std::min(rows, per));
  for (std::thread& th : pool) th.join();
}
"""


def header(t, variant, what, fault):
    lines = []
    if fault:
        lines.append("// BROKEN ON PURPOSE (%s): %s" % (fault, FAULT_WHAT[fault]))
    lines.append("// %s (%s) for task %s/%s, generated by bench/suite/make_suite.py:"
                 % (what, variant, t["level"], t["stem"]))
    lines.append("// out = %s, fp32." % expr(t))
    return "\n".join(lines)


def store_wrap(fault):
    if fault == "wrong_answer":
        return lambda e: "(%s) + 0.0625f /* BROKEN ON PURPOSE */" % e
    return lambda e: e


COMPILE_BREAK = "  const float broken = kUndeclaredScale;  // BROKEN ON PURPOSE: not declared anywhere\n  (void)broken;\n"


def launcher_params(t, chain, cuda, inplace=False):
    """Pointer parameters of a launcher (after the primary input)."""
    ps = []
    if has_input(chain):
        ps.append("const float* u")
    core = t["core"]
    if core == "layernorm":
        ps += ["const float* gamma", "const float* beta"]
    elif core == "rmsnorm":
        ps += ["const float* weight"]
    ps += ["const float* %s" % p for p in chain_ptrs(chain)]
    return ps


# ---- elementwise (and the GEMM's in-place epilogue), CUDA ----------------------------------------


def cuda_ew(t, chain, fault, inplace):
    fn = t["fn"] + ("_epilogue" if inplace else "")
    store = store_wrap(fault)
    need_col = any(op["kind"] in ("bias", "lbias") for op in chain)
    u = has_input(chain)
    ptrs = chain_ptrs(chain)
    out = []
    out.append(header(t, "cuda", "the GEMM's epilogue, in place on the GEMM's output" if inplace else
                       "one fused elementwise pass", fault))
    out.append("//\n// Memory-bound: each element is read once and written once. float4 loads and stores with\n"
               "// streaming hints when the data allows (16-byte aligned, %s), else a scalar\n"
               "// grid-stride loop. The op chain and its constants are compiled in.\n"
               % ("rows a multiple of 4 floats" if need_col else "a multiple of 4 elements"))
    out.append("#include <cstdint>\n\n#include <cuda_runtime.h>\n\nnamespace {\n\nconstexpr int kThreads = 256;\n"
               "constexpr int64_t kMaxBlocks = 8192;\n")
    if any(op["kind"] == "tanh" for op in chain):
        out.append(TANH_HELPER)
    out.append(epilogue_fn(chain, True) + "\n")
    ptr_params = "".join(", const float* __restrict__ %s" % p for p in ptrs)
    # vec4 kernel
    if inplace:
        head = "float4* y%s%s, int64_t n4, int64_t cols4" % (", const float4* __restrict__ u" if u else "", ptr_params)
    else:
        head = "const float4* __restrict__ x%s%s, float4* __restrict__ out, int64_t n4, int64_t cols4" % (
            ", const float4* __restrict__ u" if u else "", ptr_params)
    body = ["__global__ void %s_vec4_kernel(%s) {" % (fn, head)]
    if not need_col:
        body.append("  (void)cols4;")
    body.append("  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4;")
    body.append("       i += static_cast<int64_t>(gridDim.x) * kThreads) {")
    body.append("    const float4 a = %s;" % ("y[i]" if inplace else "__ldcs(x + i)"))
    if u:
        body.append("    const float4 w = __ldcs(u + i);")
    if need_col:
        body.append("    const int64_t c = static_cast<int64_t>(static_cast<uint32_t>(i) % static_cast<uint32_t>(cols4)) * 4;")
    else:
        body.append("    const int64_t c = 0;")
    body.append("    float4 o;")
    for lane, f in enumerate("xyzw"):
        body.append("    o.%s = %s;" % (f, epi_call(chain, "a.%s" % f, "c + %d" % lane, "w.%s" % f, store)))
    body.append("    %s;" % ("y[i] = o" if inplace else "__stcs(out + i, o)"))
    body += ["  }", "}", ""]
    out.append("\n".join(body))
    # scalar kernel
    if inplace:
        head = "float* y%s%s, int64_t n, int64_t cols" % (", const float* __restrict__ u" if u else "", ptr_params)
    else:
        head = "const float* __restrict__ x%s%s, float* __restrict__ out, int64_t n, int64_t cols" % (
            ", const float* __restrict__ u" if u else "", ptr_params)
    body = ["// Any shape and alignment: one element per thread, grid-stride.",
            "__global__ void %s_scalar_kernel(%s) {" % (fn, head)]
    if not need_col:
        body.append("  (void)cols;")
    body.append("  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;")
    body.append("       i += static_cast<int64_t>(gridDim.x) * kThreads) {")
    if need_col:
        body.append("    const int64_t c = static_cast<uint32_t>(i) % static_cast<uint32_t>(cols);")
    else:
        body.append("    const int64_t c = 0;")
    src = "y[i]" if inplace else "x[i]"
    body.append("    %s[i] = %s;" % ("y" if inplace else "out", epi_call(chain, src, "c", "u[i]", store)))
    body += ["  }", "}", "", "}  // namespace", ""]
    out.append("\n".join(body))
    # launcher
    lp = launcher_params(t, chain, True)
    if inplace:
        sig = ["float* y"] + lp + ["int64_t rows", "int64_t cols", "cudaStream_t stream"]
    else:
        sig = ["const float* x"] + lp + ["float* out", "int64_t rows", "int64_t cols", "cudaStream_t stream"]
    shapes = "".join("; %s: (%s)" % (p.split()[-1], "rows, cols" if p.split()[-1] == "u" else "cols,") for p in lp)
    body = ["// %s: (rows, cols) contiguous%s. At most 2^32 elements." % ("y" if inplace else "x, out", shapes),
            "// Returns the launch's cudaError_t (0: success).",
            'extern "C" int %s_launch(%s) {' % (fn, ", ".join(sig))]
    if fault == "compile_error":
        body.append(COMPILE_BREAK.rstrip("\n"))
    body.append("  const int64_t n = rows * cols;")
    body.append("  if (n == 0) return 0;")
    body.append("  if (n > 0xffffffffLL) return static_cast<int>(cudaErrorInvalidValue);")
    first = "y" if inplace else "x"
    align = ["reinterpret_cast<uintptr_t>(%s)" % first]
    if not inplace:
        align.append("reinterpret_cast<uintptr_t>(out)")
    if u:
        align.append("reinterpret_cast<uintptr_t>(u)")
    body.append("  const bool aligned = (%s) %% 16 == 0;" % " | ".join(align))
    body.append("  if (%s && aligned) {" % ("cols % 4 == 0" if need_col else "n % 4 == 0"))
    body.append("    const int64_t n4 = n / 4;")
    body.append("    int64_t blocks = (n4 + kThreads - 1) / kThreads;")
    body.append("    if (blocks > kMaxBlocks) blocks = kMaxBlocks;")
    cargs = []
    if inplace:
        cargs.append("reinterpret_cast<float4*>(y)")
    else:
        cargs.append("reinterpret_cast<const float4*>(x)")
    if u:
        cargs.append("reinterpret_cast<const float4*>(u)")
    cargs += ptrs
    if not inplace:
        cargs.append("reinterpret_cast<float4*>(out)")
    cargs += ["n4", "cols / 4"]
    body.append("    %s_vec4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(%s);" % (fn, ", ".join(cargs)))
    body.append("  } else {")
    body.append("    int64_t blocks = (n + kThreads - 1) / kThreads;")
    body.append("    if (blocks > kMaxBlocks) blocks = kMaxBlocks;")
    sargs = ["y" if inplace else "x"] + (["u"] if u else []) + ptrs + ([] if inplace else ["out"]) + ["n", "cols"]
    body.append("    %s_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(%s);" % (fn, ", ".join(sargs)))
    body.append("  }")
    body.append("  return static_cast<int>(cudaGetLastError());")
    body.append("}")
    out.append("\n".join(body) + "\n")
    return "\n".join(out)


# ---- row kernels, CUDA --------------------------------------------------------------------------

ROW_HELPERS = """__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's sum (max) in every thread: warp shuffles, then one step through shared memory.
// blockDim.x is a multiple of 32; scratch holds 32 floats and may be reused right after.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// Column of the j-th value a thread holds. kVec4: float4 i = j / 4 of the thread sits at
// threadIdx.x + i * blockDim.x; else value j sits at threadIdx.x + j * blockDim.x (coalesced either way).
template <int kVec, bool kVec4>
__device__ __forceinline__ int col_of(int j) {
  return kVec4 ? 4 * (static_cast<int>(threadIdx.x) + (j / 4) * static_cast<int>(blockDim.x)) + j % 4
               : static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x);
}

// The thread's share of one row into registers (0 past the end of the row).
template <int kVec, bool kVec4>
__device__ __forceinline__ void load_row(const float* __restrict__ xr, int cols, float (&v)[4 * kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    if (kVec4) {
      const int c = col_of<kVec, kVec4>(4 * i);
      const float4 q = c < cols ? __ldcs(reinterpret_cast<const float4*>(xr + c)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      v[4 * i] = q.x;
      v[4 * i + 1] = q.y;
      v[4 * i + 2] = q.z;
      v[4 * i + 3] = q.w;
    } else {
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const int c = col_of<kVec, kVec4>(4 * i + l);
        v[4 * i + l] = c < cols ? xr[c] : 0.0f;
      }
    }
  }
}
"""


def cuda_row_core(core, eps):
    """Kernel-body lines for the row op: reductions store out[row]; the others leave the row in v."""
    valid = "col_of<kVec, kVec4>(j) < cols"
    L = []
    if core in ("sum", "mean"):
        L += ["  float s = 0.0f;", "#pragma unroll", "  for (int j = 0; j < kN; ++j) s += v[j];  // padding is 0",
              "  s = block_sum(s, scratch);"]
        return L, ("s" if core == "sum" else "s / static_cast<float>(cols)")
    if core == "max":
        L += ["  float m = -INFINITY;", "#pragma unroll",
              "  for (int j = 0; j < kN; ++j) if (%s) m = fmaxf(m, v[j]);" % valid,
              "  m = block_max(m, scratch);"]
        return L, "m"
    if core in ("softmax", "log_softmax"):
        L += ["  float m = -INFINITY;", "#pragma unroll",
              "  for (int j = 0; j < kN; ++j) if (%s) m = fmaxf(m, v[j]);" % valid,
              "  m = block_max(m, scratch);",
              "  float s = 0.0f;", "#pragma unroll"]
        if core == "softmax":
            L += ["  for (int j = 0; j < kN; ++j) {",
                  "    v[j] = %s ? expf(v[j] - m) : 0.0f;" % valid,
                  "    s += v[j];", "  }",
                  "  const float inv = 1.0f / block_sum(s, scratch);", "#pragma unroll",
                  "  for (int j = 0; j < kN; ++j) v[j] *= inv;"]
        else:
            L += ["  for (int j = 0; j < kN; ++j) s += %s ? expf(v[j] - m) : 0.0f;" % valid,
                  "  const float lse = logf(block_sum(s, scratch));", "#pragma unroll",
                  "  for (int j = 0; j < kN; ++j) v[j] = (v[j] - m) - lse;"]
        return L, None
    if core == "layernorm":
        L += ["  float s = 0.0f;", "#pragma unroll", "  for (int j = 0; j < kN; ++j) s += v[j];",
              "  const float mean = block_sum(s, scratch) / static_cast<float>(cols);",
              "  float q = 0.0f;", "#pragma unroll",
              "  for (int j = 0; j < kN; ++j) {",
              "    const float d = %s ? v[j] - mean : 0.0f;" % valid,
              "    q += d * d;", "  }",
              "  const float rstd = rsqrtf(block_sum(q, scratch) / static_cast<float>(cols) + %s);" % cf(eps),
              "#pragma unroll",
              "  for (int j = 0; j < kN; ++j) {",
              "    const int c = col_of<kVec, kVec4>(j);",
              "    if (c < cols) v[j] = (v[j] - mean) * rstd * __ldg(gamma + c) + __ldg(beta + c);",
              "  }"]
        return L, None
    if core == "rmsnorm":
        L += ["  float q = 0.0f;", "#pragma unroll", "  for (int j = 0; j < kN; ++j) q += v[j] * v[j];",
              "  const float r = rsqrtf(block_sum(q, scratch) / static_cast<float>(cols) + %s);" % cf(eps),
              "#pragma unroll",
              "  for (int j = 0; j < kN; ++j) {",
              "    const int c = col_of<kVec, kVec4>(j);",
              "    if (c < cols) v[j] = v[j] * r * __ldg(weight + c);",
              "  }"]
        return L, None
    raise ValueError(core)


def cuda_row(t, fault):
    fn = t["fn"]
    core, chain = t["core"], t["chain"]
    store = store_wrap(fault)
    u = has_input(chain)
    lp = launcher_params(t, chain, True)
    pnames = [p.split()[-1] for p in lp]
    out = [header(t, "cuda", "a row kernel", fault)]
    out.append("//\n// One block per row; the row is read from HBM once into registers (up to 8 float4s a thread,\n"
               "// 1024 threads: rows of at most 32768 floats) and %s. Block reductions: warp shuffles, then\n"
               "// one shared-memory step. float4 loads/stores when the row is a multiple of 4 floats and aligned.\n"
               % ("reduced to one value" if core in REDUCE else "written once"))
    out.append("#include <cstdint>\n\n#include <cuda_runtime.h>\n\nnamespace {\n")
    out.append(ROW_HELPERS)
    if any(op["kind"] == "tanh" for op in chain):
        out.append(TANH_HELPER)
    if chain:
        out.append(epilogue_fn(chain, True) + "\n")
    kparams = ["const float* __restrict__ x"] + ["const float* __restrict__ %s" % n for n in pnames] + \
              ["float* __restrict__ out", "int cols"]
    body = ["template <int kVec, bool kVec4>",
            "__global__ void __launch_bounds__(1024) %s_kernel(%s) {" % (fn, ", ".join(kparams)),
            "  constexpr int kN = 4 * kVec;",
            "  __shared__ float scratch[32];",
            "  const int64_t row = blockIdx.x;",
            "  float v[kN];",
            "  load_row<kVec, kVec4>(x + row * cols, cols, v);"]
    lines, scalar = cuda_row_core(core, t.get("eps", 0.0))
    body += lines
    if scalar is not None:
        body.append("  if (threadIdx.x == 0) out[row] = %s;" % store(scalar))
    else:
        body.append("  float* __restrict__ orow = out + row * cols;")
        if u:
            body.append("  const float* __restrict__ urow = u + row * cols;")
        body += ["#pragma unroll", "  for (int i = 0; i < kVec; ++i) {", "    if (kVec4) {",
                 "      const int c = col_of<kVec, kVec4>(4 * i);", "      if (c < cols) {"]
        if u:
            body.append("        const float4 w = __ldcs(reinterpret_cast<const float4*>(urow + c));")
        body.append("        float4 o;")
        for lane, f in enumerate("xyzw"):
            body.append("        o.%s = %s;" % (f, epi_call(chain, "v[4 * i + %d]" % lane, "c + %d" % lane, "w.%s" % f, store)))
        body += ["        __stcs(reinterpret_cast<float4*>(orow + c), o);", "      }", "    } else {",
                 "#pragma unroll", "      for (int l = 0; l < 4; ++l) {",
                 "        const int c = col_of<kVec, kVec4>(4 * i + l);",
                 "        if (c < cols) orow[c] = %s;" % epi_call(chain, "v[4 * i + l]", "c", "urow[c]", store),
                 "      }", "    }", "  }"]
    body += ["}", "", "}  // namespace", ""]
    out.append("\n".join(body))
    sig = ["const float* x"] + lp + ["float* out", "int64_t rows", "int64_t cols", "cudaStream_t stream"]
    body = ["// x: (rows, cols) contiguous, cols <= 32768; out: (%s). Returns a cudaError_t (0: success)."
            % ("rows" if core in REDUCE else "rows, cols"),
            'extern "C" int %s_launch(%s) {' % (fn, ", ".join(sig))]
    if fault == "compile_error":
        body.append(COMPILE_BREAK.rstrip("\n"))
    body += ["  if (rows == 0 || cols == 0) return 0;",
             "  if (rows > 0x7fffffffLL) return static_cast<int>(cudaErrorInvalidValue);",
             "  // Up to 256 threads a row, up to 8 float4 slots each; longer rows take 1024 threads.",
             "  const int64_t groups = (cols + 3) / 4;",
             "  int threads = groups >= 256 ? 256 : static_cast<int>((groups + 31) / 32 * 32);",
             "  int64_t per = (groups + threads - 1) / threads;",
             "  if (per > 8) {",
             "    threads = 1024;",
             "    per = (groups + threads - 1) / threads;",
             "  }",
             "  if (per > 8) return static_cast<int>(cudaErrorInvalidValue);"]
    align = ["reinterpret_cast<uintptr_t>(x)", "reinterpret_cast<uintptr_t>(out)"] if core not in REDUCE else \
        ["reinterpret_cast<uintptr_t>(x)"]
    if u:
        align.append("reinterpret_cast<uintptr_t>(u)")
    body.append("  const bool vec4 = cols %% 4 == 0 && (%s) %% 16 == 0;" % " | ".join(align))
    body.append("  const dim3 grid(static_cast<unsigned>(rows));")
    args = ", ".join(["x"] + pnames + ["out", "static_cast<int>(cols)"])
    for i, vec in enumerate((1, 2, 4, 8)):
        cond = "per <= %d" % vec
        kw = "if" if i == 0 else "} else if"
        if vec == 8:
            body.append("  } else {")
        else:
            body.append("  %s (%s) {" % (kw, cond))
        body.append("    if (vec4) %s_kernel<%d, true><<<grid, threads, 0, stream>>>(%s);" % (fn, vec, args))
        body.append("    else %s_kernel<%d, false><<<grid, threads, 0, stream>>>(%s);" % (fn, vec, args))
    body += ["  }", "  return static_cast<int>(cudaGetLastError());", "}"]
    out.append("\n".join(body) + "\n")
    return "\n".join(out)


SGEMM_CPP = """// sgemm.cpp (cuda): host code for task %(task)s, the fp32 GEMM through cuBLAS.
//
// cuBLAS is column-major: the row-major C (m, n) = A (m, k) @ W (n, k)^T is the column-major
// C' (n, m) = op(W') @ A', where W' (k, n) and A' (k, m) are W and A read column-major; so op = T
// for W and N for A, all leading dimensions the row lengths.
#include <climits>
#include <cstdint>

#include <cublas_v2.h>

// handle: PyTorch's cublasHandle_t, already bound to the current stream. Plain fp32 math (no TF32)
// for this call; the handle's previous mode is restored. Returns a cublasStatus_t (0: success).
extern "C" int sgemm_nt(void* handle, const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) return CUBLAS_STATUS_INVALID_VALUE;
  cublasHandle_t h = static_cast<cublasHandle_t>(handle);
  cublasMath_t previous;
  cublasStatus_t st = cublasGetMathMode(h, &previous);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const float one = 1.0f, zero = 0.0f;
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  st = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, K, a, K, &zero, c, N);
  const cublasStatus_t restored = cublasSetMathMode(h, previous);
  return st != CUBLAS_STATUS_SUCCESS ? st : restored;
}
"""


# ---- CPU kernels --------------------------------------------------------------------------------


def cpu_ew_loop(t, chain, fault, inplace):
    """The function body applying `chain` row by row (in place on y, or x -> out)."""
    store = store_wrap(fault)
    u = has_input(chain)
    L = ["  parallel_rows(rows, 16, [=](int64_t r0, int64_t r1) {",
         "    for (int64_t r = r0; r < r1; ++r) {"]
    if inplace:
        L.append("      float* yr = y + r * cols;")
    else:
        L += ["      const float* xr = x + r * cols;", "      float* orow = out + r * cols;"]
    if u:
        L.append("      const float* ur = u + r * cols;")
    src = "yr[c]" if inplace else "xr[c]"
    dst = "yr[c]" if inplace else "orow[c]"
    L.append("      for (int64_t c = 0; c < cols; ++c) %s = %s;" % (dst, epi_call(chain, src, "c", "ur[c]", store)))
    L += ["    }", "  });"]
    return L


def cpu_row_body(t, fault):
    core, chain = t["core"], t["chain"]
    store = store_wrap(fault)
    u = has_input(chain)
    eps = cf(t.get("eps", 0.0))
    L = ["  parallel_rows(rows, 8, [=](int64_t r0, int64_t r1) {",
         "    for (int64_t r = r0; r < r1; ++r) {",
         "      const float* xr = x + r * cols;"]
    if core in REDUCE:
        if core == "max":
            L += ["      float m = xr[0];", "      for (int64_t c = 1; c < cols; ++c) m = std::max(m, xr[c]);",
                  "      out[r] = %s;" % store("m")]
        else:
            L += ["      double s = 0.0;  // double accumulation: within an ulp or two of PyTorch's",
                  "      for (int64_t c = 0; c < cols; ++c) s += xr[c];",
                  "      out[r] = %s;" % store("static_cast<float>(s)" if core == "sum" else
                                          "static_cast<float>(s / static_cast<double>(cols))")]
        L += ["    }", "  });"]
        return L
    L.append("      float* orow = out + r * cols;")
    if u:
        L.append("      const float* ur = u + r * cols;")
    if core in ("softmax", "log_softmax"):
        L += ["      float m = xr[0];", "      for (int64_t c = 1; c < cols; ++c) m = std::max(m, xr[c]);",
              "      double s = 0.0;"]
        if core == "softmax":
            L += ["      for (int64_t c = 0; c < cols; ++c) {", "        const float e = std::exp(xr[c] - m);",
                  "        orow[c] = e;", "        s += e;", "      }",
                  "      const float inv = static_cast<float>(1.0 / s);"]
            val = "orow[c] * inv"
        else:
            L += ["      for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);",
                  "      const float lse = static_cast<float>(std::log(s));"]
            val = "(xr[c] - m) - lse"
    elif core == "layernorm":
        L += ["      double s = 0.0;", "      for (int64_t c = 0; c < cols; ++c) s += xr[c];",
              "      const float mean = static_cast<float>(s / static_cast<double>(cols));",
              "      double q = 0.0;", "      for (int64_t c = 0; c < cols; ++c) {",
              "        const double d = xr[c] - mean;", "        q += d * d;", "      }",
              "      const float rstd = static_cast<float>(1.0 / std::sqrt(q / static_cast<double>(cols) + %s));" % eps]
        val = "(xr[c] - mean) * rstd * gamma[c] + beta[c]"
    elif core == "rmsnorm":
        L += ["      double q = 0.0;",
              "      for (int64_t c = 0; c < cols; ++c) q += static_cast<double>(xr[c]) * xr[c];",
              "      const float rs = static_cast<float>(1.0 / std::sqrt(q / static_cast<double>(cols) + %s));" % eps]
        val = "xr[c] * rs * weight[c]"
    else:
        raise ValueError(core)
    L.append("      for (int64_t c = 0; c < cols; ++c) orow[c] = %s;" % epi_call(chain, val, "c", "ur[c]", store))
    L += ["    }", "  });"]
    return L


def cpu_kernels(t, fault):
    fn, core = t["fn"], t["core"]
    chain = ([{"kind": "lbias"}] + t["chain"]) if core == "gemm" else t["chain"]
    what = {"ew": "one fused elementwise pass", "gemm": "a blocked fp32 GEMM, then the fused epilogue in place"}.get(
        core, "a row kernel, one row at a time (double accumulation)")
    out = [header(t, "cpu", what, fault)]
    out.append("\n#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <vector>\n\n#include \"parallel_rows.h\"\n")
    if chain:
        out.append("namespace {\n\n%s\n\n}  // namespace\n" % epilogue_fn(chain, False))
    lp = launcher_params(t, chain, False)
    body = []
    if core == "gemm":
        body.append("""// c (m, n) = a (m, k) @ w (n, k)^T, row-major. w is first transposed into wt (k, n) so that the
// inner loop runs over contiguous output columns (vectorizable, each sum still in k order); a
// thread takes a block of rows and computes 4 rows x 64 columns of c at a time.
extern "C" void sgemm_nt_cpu(const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k) {
  std::vector<float> wt(static_cast<size_t>(k * n));
  float* wtp = wt.data();
  parallel_rows(n, 64, [=](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t p = 0; p < k; ++p) wtp[p * n + j] = w[j * k + p];
    }
  });
  parallel_rows(m, 4, [=](int64_t r0, int64_t r1) {
    constexpr int64_t kR = 4, kC = 64;
    float acc[kR][kC];
    for (int64_t i0 = r0; i0 < r1; i0 += kR) {
      const int64_t nr = std::min(kR, r1 - i0);
      for (int64_t j0 = 0; j0 < n; j0 += kC) {
        const int64_t nc = std::min(kC, n - j0);
        for (int64_t i = 0; i < kR; ++i) std::fill(acc[i], acc[i] + kC, 0.0f);
        for (int64_t p = 0; p < k; ++p) {
          const float* wr = wtp + p * n + j0;
          for (int64_t i = 0; i < nr; ++i) {
            const float av = a[(i0 + i) * k + p];
            float* ai = acc[i];
            for (int64_t j = 0; j < nc; ++j) ai[j] += av * wr[j];
          }
        }
        for (int64_t i = 0; i < nr; ++i) std::copy(acc[i], acc[i] + nc, c + (i0 + i) * n + j0);
      }
    }
  });
}
""")
        sig = ["float* y"] + lp + ["int64_t rows", "int64_t cols"]
        body.append("// y: (rows, cols), updated in place.")
        body.append('extern "C" void %s_epilogue_cpu(%s) {' % (fn, ", ".join(sig)))
        if fault == "compile_error":
            body.append(COMPILE_BREAK.rstrip("\n"))
        body += cpu_ew_loop(t, chain, fault, True)
        body.append("}")
    elif core == "ew":
        sig = ["const float* x"] + lp + ["float* out", "int64_t rows", "int64_t cols"]
        body.append('extern "C" void %s_cpu(%s) {' % (fn, ", ".join(sig)))
        if fault == "compile_error":
            body.append(COMPILE_BREAK.rstrip("\n"))
        body += cpu_ew_loop(t, chain, fault, False)
        body.append("}")
    else:
        sig = ["const float* x"] + lp + ["float* out", "int64_t rows", "int64_t cols"]
        body.append('extern "C" void %s_cpu(%s) {' % (fn, ", ".join(sig)))
        if fault == "compile_error":
            body.append(COMPILE_BREAK.rstrip("\n"))
        body += cpu_row_body(t, fault)
        body.append("}")
    out.append("\n".join(body) + "\n")
    return "\n".join(out)


# ---- bindings -----------------------------------------------------------------------------------


def render_binding(t, variant, fault):
    cuda = variant == "cuda"
    fn, core = t["fn"], t["core"]
    chain = ([{"kind": "lbias"}] + t["chain"]) if core == "gemm" else t["chain"]
    lp = launcher_params(t, chain, cuda)
    pnames = [p.split()[-1] for p in lp]
    dev = "CUDA" if cuda else "CPU"
    out = [header(t, variant, "fast-mode binding", fault)]
    out.append("\n#include <anvil/binding.h>\n")
    if core == "gemm":
        if cuda:
            out.append("// From sgemm.cpp: a cublasStatus_t (0: success).")
            out.append('extern "C" int sgemm_nt(void* handle, const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);')
            out.append("// From %s_epilogue.cu: a cudaError_t (0: success); anvil::Stream is cudaStream_t." % fn)
            out.append('extern "C" int %s_epilogue_launch(%s);' % (
                fn, ", ".join(["float* y"] + lp + ["int64_t rows", "int64_t cols", "anvil::Stream stream"])))
        else:
            out.append("// From %s.cpp." % fn)
            out.append('extern "C" void sgemm_nt_cpu(const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);')
            out.append('extern "C" void %s_epilogue_cpu(%s);' % (fn, ", ".join(["float* y"] + lp + ["int64_t rows", "int64_t cols"])))
    else:
        if cuda:
            out.append("// From %s.cu: a cudaError_t (0: success); anvil::Stream is cudaStream_t." % fn)
            out.append('extern "C" int %s_launch(%s);' % (
                fn, ", ".join(["const float* x"] + lp + ["float* out", "int64_t rows", "int64_t cols", "anvil::Stream stream"])))
        else:
            out.append("// From %s.cpp." % fn)
            out.append('extern "C" void %s_cpu(%s);' % (
                fn, ", ".join(["const float* x"] + lp + ["float* out", "int64_t rows", "int64_t cols"])))
    out.append("")
    out.append("static void check_f32(const anvil::Tensor& t, const char* what) {")
    out.append("  ANVIL_CHECK(t.%s() && t.is_contiguous() && t.dtype() == anvil::kFloat32, what, \" must be a contiguous float32 %s tensor\");"
               % ("is_cuda" if cuda else "is_cpu", dev))
    out.append("}")
    out.append("")
    ins = inputs(t)
    ps = params(t)
    targs = [n for n, _ in ins] + [c for _, c, _ in ps]
    out.append("// out = %s" % expr(t))
    out.append("static anvil::Tensor %s(%s) {" % (fn, ", ".join("anvil::Tensor %s" % a for a in targs)))
    for a in targs:
        out.append('  check_f32(%s, "%s");' % (a, a))
    out.append('  ANVIL_CHECK(x.dim() >= 1, "x must have at least one dimension");')
    if fault == "runtime_error":
        out.append('  ANVIL_CHECK(x.numel() < 0, "BROKEN ON PURPOSE: this check never holds");')
    if core == "gemm":
        out.append('  ANVIL_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "x\'s last dimension must match weight (out, in)");')
        out.append("  const int64_t k = weight.size(1), n = weight.size(0), m = x.numel() / k;")
        out.append('  ANVIL_CHECK(lin_bias.dim() == 1 && lin_bias.size(0) == n, "lin_bias must be (", n, ",)");')
        if "bias" in pnames:
            out.append('  ANVIL_CHECK(bias.dim() == 1 && bias.size(0) == n, "bias must be (", n, ",)");')
        out.append("  std::vector<int64_t> shape = x.sizes();")
        out.append("  shape.back() = n;")
        if "u" in pnames:
            out.append('  ANVIL_CHECK(y.sizes() == shape, "y must have the output\'s shape");')
        out.append("  anvil::Tensor out = anvil::empty(shape, anvil::kFloat32, x);")
        if cuda:
            out.append("  void* handle = anvil::cublas_handle();")
            out.append('  ANVIL_CHECK(handle != nullptr, "no cuBLAS handle");')
            out.append("  const int st = sgemm_nt(handle, x.data<float>(), weight.data<float>(), out.data<float>(), m, n, k);")
            out.append('  ANVIL_CHECK(st == 0, "cublasSgemm failed with status ", st);')
        else:
            out.append("  sgemm_nt_cpu(x.data<float>(), weight.data<float>(), out.data<float>(), m, n, k);")
        cargs = ["out.data<float>()"] + ["%s.data<float>()" % ("y" if p == "u" else p) for p in pnames] + ["m", "n"]
        if cuda:
            out.append("  const int err = %s_epilogue_launch(%s, anvil::stream());" % (fn, ", ".join(cargs)))
            out.append('  ANVIL_CHECK(err == 0, "epilogue launch failed with CUDA error ", err);')
        else:
            out.append("  %s_epilogue_cpu(%s);" % (fn, ", ".join(cargs)))
    else:
        out.append("  const int64_t cols = x.size(-1);")
        out.append("  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;")
        for p in pnames:
            if p == "u":
                out.append('  ANVIL_CHECK(y.sizes() == x.sizes(), "y must have x\'s shape");')
            else:
                out.append('  ANVIL_CHECK(%s.dim() == 1 && %s.size(0) == cols, "%s must be (", cols, ",)");' % (p, p, p))
        if core not in ("ew",):
            out.append('  ANVIL_CHECK(cols <= 32768, "rows of at most 32768 floats, got ", cols);')
        if core in REDUCE:
            out.append("  std::vector<int64_t> shape = x.sizes();")
            out.append("  shape.pop_back();")
            out.append("  anvil::Tensor out = anvil::empty(shape, anvil::kFloat32, x);")
        else:
            out.append("  anvil::Tensor out = anvil::empty_like(x);")
        cargs = ["x.data<float>()"] + ["%s.data<float>()" % ("y" if p == "u" else p) for p in pnames] + \
                ["out.data<float>()", "rows", "cols"]
        if cuda:
            out.append("  const int err = %s_launch(%s, anvil::stream());" % (fn, ", ".join(cargs)))
            out.append('  ANVIL_CHECK(err == 0, "kernel launch failed with CUDA error ", err);')
        else:
            out.append("  %s_cpu(%s);" % (fn, ", ".join(cargs)))
    out.append("  return out;")
    out.append("}")
    out.append("ANVIL_REGISTER(%s);" % fn)
    return "\n".join(out) + "\n"


def solution_files(t, variant, fault):
    """{relative path: text} of one workdir."""
    fn, core = t["fn"], t["core"]
    files = {"model_new.py": render_model_new(t, variant)}
    if variant == "cuda":
        if core == "gemm":
            files["kernels/sgemm.cpp"] = SGEMM_CPP % {"task": "%s/%s" % (t["level"], t["stem"])}
            files["kernels/%s_epilogue.cu" % fn] = cuda_ew(t, [{"kind": "lbias"}] + t["chain"], fault, True)
        elif core == "ew":
            files["kernels/%s.cu" % fn] = cuda_ew(t, t["chain"], fault, False)
        else:
            files["kernels/%s.cu" % fn] = cuda_row(t, fault)
    else:
        files["kernels/parallel_rows.h"] = PARALLEL_H
        files["kernels/%s.cpp" % fn] = cpu_kernels(t, fault)
    files["kernels/%s_binding.cpp" % fn] = render_binding(t, variant, fault)
    return files


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------

FAULT_WHAT = {
    "wrong_answer": "every output element is off by +0.0625",
    "compile_error": "the launcher uses an undeclared identifier (kUndeclaredScale)",
    "runtime_error": "the binding's ANVIL_CHECK(x.numel() < 0) always fails: a clean RuntimeError",
}

# (kind, preferred level); each picks a distinct task.
FAULT_PLAN = (("wrong_answer", "level1"), ("wrong_answer", "level2"), ("compile_error", "level2"),
              ("runtime_error", "level1"), ("missing", "level1"), ("missing", "level2"))


def pick_faults(tasks, seed):
    rng = random.Random("faults-%d" % seed)
    taken = set()
    picks = []
    for kind, level in FAULT_PLAN:
        pool = [t for t in tasks if t["level"] == level and t["stem"] not in taken] or \
               [t for t in tasks if t["stem"] not in taken]
        t = rng.choice(pool)
        taken.add(t["stem"])
        picks.append((kind, t))
    return picks


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.chmod(path, 0o644)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a KernelBench-layout suite (tasks + CUDA/CPU solutions) for anvil bench.")
    ap.add_argument("--out", required=True, help="output folder (tasks/, solutions/, manifest.json)")
    ap.add_argument("--tasks", type=int, default=100, help="number of tasks (about 60%% level1, 40%% level2; default 100)")
    ap.add_argument("--faults", action="store_true", help="break a few entries on purpose (printed and in the manifest)")
    ap.add_argument("--seed", type=int, default=0, help="seed of shapes, op mixes and faults (default 0)")
    ap.add_argument("--force", action="store_true", help="replace tasks/, solutions/ and manifest.json if present")
    a = ap.parse_args(argv)
    if a.tasks < 2:
        ap.error("--tasks must be at least 2 (one per level)")
    if a.faults and a.tasks < 6:
        ap.error("--faults needs at least 6 tasks")
    started = time.monotonic()
    out = os.path.abspath(a.out)
    existing = [p for p in ("tasks", "solutions", "manifest.json") if os.path.lexists(os.path.join(out, p))]
    if existing and not a.force:
        ap.error("%s already holds %s (use --force to replace them)" % (out, ", ".join(existing)))
    for p in existing:
        full = os.path.join(out, p)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)

    tasks = plan(a.tasks, a.seed)
    faults = {}
    if a.faults:
        for kind, t in pick_faults(tasks, a.seed):
            faults[(t["level"], t["id"])] = kind

    manifest_tasks = []
    for t in tasks:
        fault = faults.get((t["level"], t["id"]))
        task_rel = "tasks/%s/%s.py" % (t["level"], t["stem"])
        write(os.path.join(out, task_rel), render_task(t, a.seed))
        sol_rel = None
        if fault != "missing":
            sol_rel = "solutions/%s/%s" % (t["level"], t["stem"])
            for variant in ("cuda", "cpu"):
                for rel, text in sorted(solution_files(t, variant, fault).items()):
                    write(os.path.join(out, sol_rel, variant, rel), text)
        shapes = {"inputs": {n: s for n, s in inputs(t)}, "params": {c: s for _, c, s in params(t)},
                  "output": out_shape(t)}
        manifest_tasks.append({
            "level": t["level"], "id": t["id"], "name": t["name"], "stem": t["stem"], "family": t["family"],
            "ops": ops_list(t), "expr": expr(t), "shapes": shapes,
            "init_inputs": [v for _, _, v in init_args(t)], "function": t["fn"],
            "task": task_rel, "solution": sol_rel,
            "variants": ["cuda", "cpu"] if sol_rel else [],
            "fault": fault, "expected_outcome": fault or "ok",
            "eager_estimate": eager_estimate(t),
        })

    fault_list, extra, unreadable = [], [], []
    if a.faults:
        for t in tasks:
            kind = faults.get((t["level"], t["id"]))
            if kind:
                fault_list.append({"kind": kind, "level": t["level"], "id": t["id"], "stem": t["stem"],
                                   "what": FAULT_WHAT.get(kind, "no solution folder")})
        # An extra solution folder (a correct copy of level1's first solution) whose id matches no task.
        lv1 = [t for t in tasks if t["level"] == "level1"]
        src = next(t for t in lv1 if faults.get((t["level"], t["id"])) != "missing")
        extra_id = max(t["id"] for t in lv1) + 100
        extra_rel = "solutions/level1/%d_%s" % (extra_id, src["name"])
        for variant in ("cuda", "cpu"):
            for rel, text in sorted(solution_files(src, variant, None).items()):
                write(os.path.join(out, extra_rel, variant, rel), text)
        extra.append({"path": extra_rel, "id": extra_id, "level": "level1", "copy_of": src["stem"],
                      "expected": "extra (no task level1 with id %d)" % extra_id})
        fault_list.append({"kind": "extra", "level": "level1", "id": extra_id, "stem": os.path.basename(extra_rel),
                           "what": "a solution folder whose id matches no task"})
        # An unreadable task file: a dangling symbolic link named like a task (root reads mode-000 files).
        lv2 = [t for t in tasks if t["level"] == "level2"]
        bad_id = max(t["id"] for t in lv2) + 1
        bad_rel = "tasks/level2/%d_Gemm_Unreadable.py" % bad_id
        target = "../missing/%d_Gemm_Unreadable.py" % bad_id
        os.makedirs(os.path.join(out, "tasks", "level2"), exist_ok=True)
        os.symlink(target, os.path.join(out, bad_rel))
        unreadable.append({"path": bad_rel, "target": target, "expected": "unreadable (a dangling symbolic link)"})
        fault_list.append({"kind": "unreadable", "level": "level2", "id": bad_id, "stem": "%d_Gemm_Unreadable" % bad_id,
                           "what": "a dangling symbolic link named like a task"})

    fam_counts = {}
    for t in tasks:
        fam_counts.setdefault(t["level"], {}).setdefault(t["family"], 0)
        fam_counts[t["level"]][t["family"]] += 1
    manifest = {
        "schema": SCHEMA, "generator": "bench/suite/make_suite.py", "seed": a.seed, "tasks_requested": a.tasks,
        "faults_enabled": a.faults,
        "levels": {lv: sum(fam.values()) for lv, fam in sorted(fam_counts.items())},
        "families": fam_counts,
        "tasks": manifest_tasks, "faults": fault_list, "extra_solutions": extra, "unreadable_tasks": unreadable,
        "expected_outcomes": {},
    }
    for m in manifest_tasks:
        manifest["expected_outcomes"][m["expected_outcome"]] = manifest["expected_outcomes"].get(m["expected_outcome"], 0) + 1
    write(os.path.join(out, "manifest.json"), json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    seconds = time.monotonic() - started
    print("wrote %d tasks (%s) to %s in %.2f s" % (
        len(tasks), ", ".join("%s %d" % kv for kv in sorted(manifest["levels"].items())), out, seconds))
    for lv, fam in sorted(fam_counts.items()):
        print("  %s: %s" % (lv, ", ".join("%s %d" % kv for kv in sorted(fam.items()))))
    if a.faults:
        print("broken on purpose:")
        for f in fault_list:
            print("  %-13s %s/%s: %s" % (f["kind"], f["level"], f["stem"], f["what"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
