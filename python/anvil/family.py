"""python -m anvil.family SPEC...: the kernel family of each task, from the operations its code names.

SPEC is a task file (KernelBench format) or DATASET#ROW. Prints one JSON object:
{"tasks": [{"spec", "family", "ops"} | {"spec", "family": "unknown", "error"}]}; exit status 0
(a task that cannot be read is "unknown" with the reason), 2 on bad arguments.

The families are the paper's reporting groups (docs/bench.md, "Kernel families"), decided from the
canonical names of every torch operation the file's classes name (`Model.forward`'s calls and the
modules built anywhere, a Sequential's included), first match wins:
  attention                an attention or transformer layer, or softmax with two matrix products
  composite                a recurrent layer, or convolutions and matrix products (linear included)
  convolution              a convolution (its epilogue, activation or norm, does not change it)
  GEMM                     a matrix product (linear, matmul, bmm, einsum, ...)
  reduction/normalization  a reduction, softmax, norm, pooling or loss
  elementwise/activation   the rest
"""
import ast
import json
import sys

from anvil._cli import ArgumentParser, UsageError
from anvil.synth.catalog import canonical, family as op_family
from anvil.synth.decontam import API_ROOTS, CodeError, dotted_name, op_sequence, parse

FAMILIES = ("GEMM", "convolution", "reduction/normalization", "elementwise/activation", "attention", "composite")
UNKNOWN = "unknown"
MATRIX = {"matmul", "bmm", "mm", "einsum", "baddbmm", "addmm", "linear", "bilinear"}
PRODUCTS = {"matmul", "bmm", "einsum", "baddbmm"}
# reductions the catalogue does not hold (losses by their functional names, arg-reductions)
REDUCING = {"argmax", "argmin", "crossentropy", "kldiv", "nllloss", "binarycrossentropy",
            "binarycrossentropywithlogits", "cosinesimilarity", "pairwisedistance"}
RECURRENT = {"lstm", "gru", "rnn", "lstmcell", "grucell", "rnncell"}


def named_ops(code, where="<code>"):
    """The canonical names of the operations the file's classes name: forward's sequence first, then
    every torch module or function called anywhere in a class (layers built in a Sequential, in a
    helper class)."""
    ops = op_sequence(code, where)
    seen = set(ops)
    for cls in (n for n in parse(code, where).body if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.Call):
                name = dotted_name(node.func)
                if name and name.split(".")[0] in API_ROOTS:
                    c = canonical(name)
                    if c not in seen:
                        seen.add(c)
                        ops.append(c)
    return ops


def family_of(ops):
    """The family of a task whose operations are `ops` (canonical names)."""
    fams = {op_family(op) for op in ops}
    matrix = [op for op in ops if op in MATRIX or op_family(op) == "gemm"]
    products = sum(op in PRODUCTS for op in ops)  # q.k^T and .v: matrix products of two activations
    if any("attention" in op or "transformer" in op for op in ops) or ("softmax" in ops and products >= 2):
        return "attention"
    if RECURRENT & set(ops) or ("convolution" in fams and matrix):
        return "composite"
    if "convolution" in fams:
        return "convolution"
    if matrix:
        return "GEMM"
    if fams & {"reduction", "normalization", "pooling"} or any(op.endswith("loss") or op in REDUCING for op in ops):
        return "reduction/normalization"
    return "elementwise/activation"


def classify(spec):
    """{"spec", "family", "ops"} for one task, or family "unknown" with the error."""
    try:
        code = _code(spec)
        ops = named_ops(code, spec)
        return {"spec": spec, "family": family_of(ops), "ops": ops}
    except (OSError, UnicodeDecodeError, CodeError, ValueError) as e:
        return {"spec": spec, "family": UNKNOWN, "error": str(e).splitlines()[0] if str(e) else type(e).__name__}


def _code(spec):
    path, _, row = spec.rpartition("#")
    if path and row.isdigit():
        from anvil.dataset import DatasetError, read_row

        try:
            return read_row(path, int(row))["code"]
        except DatasetError as e:
            raise ValueError(str(e)) from None
    with open(spec, encoding="utf-8") as f:
        return f.read()


def main(argv=None):
    ap = ArgumentParser(prog="python -m anvil.family", description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+", metavar="SPEC", help="a task file, or DATASET#ROW")
    try:
        args = ap.parse_args(argv)
    except UsageError as e:
        print("python -m anvil.family: %s" % e, file=sys.stderr)
        return 2
    json.dump({"tasks": [classify(s) for s in args.specs]}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
