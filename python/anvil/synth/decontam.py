"""Decontamination against KernelBench: by operator sequence and by normalized-code similarity.

    python -m anvil.synth.decontam index --kernelbench DIR [--out FILE]   # the reference index
    python -m anvil.synth.decontam check FILE... [--index FILE] [--json]  # tasks against it

A task's **operator sequence** is what its `Model.forward` computes, in evaluation order, each
operation by its canonical name (catalog.canonical: `self.conv(x)` of an `nn.Conv2d` is `conv2d`,
`torch.relu(x)`, `F.relu(x)` and `x.relu()` are `relu`, `x + self.bias` is `add`); layout
operations (view, reshape, permute, ...) are not operations. Its **fingerprint** is the set of
hashed 5-grams of its syntax tree walked in pre-order with identifiers, literals and docstrings
normalized away (torch's API names are kept: they are what the code does). The **similarity** of two
tasks is the Jaccard index of their fingerprints (1.0: the same code up to names, sizes and
comments).

A task is **contaminated** when its operator sequence is a KernelBench problem's, or its
similarity to one is above the threshold (0.9, the paper's: CUDA Agent removed training tasks
whose maximum AST similarity to a KernelBench problem was above 0.9). The index holds, per
KernelBench problem of levels 1-3, its level, file name, operator sequence and fingerprint: data
derived from KernelBench, not its code (share/synth/kernelbench-index.json, with the commit it was
made from).
"""
import argparse
import ast
import json
import os
import sys
import zlib

from anvil.synth.catalog import canonical

INDEX_VERSION = 1
THRESHOLD = 0.9
NGRAM = 5
LEVELS = ("level1", "level2", "level3")

# tensor methods and functions that move or view data without computing (not operations)
LAYOUT = {
    "view", "reshape", "permute", "transpose", "contiguous", "size", "dim", "unsqueeze", "squeeze",
    "flatten", "expand", "expandas", "to", "float", "double", "half", "bfloat16", "cuda", "cpu",
    "t", "narrow", "viewas", "reshapeas", "numel", "item", "detach", "requiresgrad", "type",
    "chunk", "split", "unbind", "movedim", "squeeze", "repeat", "cat", "stack", "flip",
}
# calls that make tensors rather than compute on them
CREATION = {
    "zeros", "ones", "randn", "rand", "empty", "tensor", "arange", "full", "zeroslike", "oneslike",
    "randlike", "randnlike", "emptylike", "fulllike", "linspace", "eye", "randint", "parameter",
    "super", "len", "range", "int", "float", "list", "tuple", "isinstance", "getattr", "print",
    "append", "extend", "insert", "pop", "items", "keys", "values", "format", "enumerate", "zip",
}
BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul",
          ast.Pow: "pow", ast.FloorDiv: "floordiv", ast.Mod: "mod"}
API_ROOTS = {"torch", "nn", "F", "functional"}


class CodeError(ValueError):
    """The code cannot be parsed as a KernelBench-format task; the message says why."""


def parse(code, where="<code>"):
    try:
        return ast.parse(code)
    except SyntaxError as e:
        raise CodeError("%s: not valid Python (line %s: %s)" % (where, e.lineno, e.msg))


def dotted_name(node):
    """`torch.nn.functional.relu` for the attribute chain `node`, or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _model_class(tree):
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for c in classes:
        if c.name == "Model":
            return c
    return classes[0] if classes else None


def op_sequence(code, where="<code>"):
    """The canonical operations `Model.forward` performs, in evaluation order."""
    tree = parse(code, where)
    cls = _model_class(tree)
    if cls is None:
        raise CodeError("%s: no class Model" % where)
    modules = {}  # self.attr -> canonical name of the module assigned in any method
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    for fn in methods.values():
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                callee = dotted_name(node.value.func)
                for target in node.targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self" and callee):
                        modules[target.attr] = canonical(callee)
    forward = methods.get("forward")
    if forward is None:
        raise CodeError("%s: Model has no forward" % where)
    ops = []

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not forward:
            return
        if isinstance(node, ast.Call):
            for child in [*node.args, *[k.value for k in node.keywords]]:
                visit(child)
            func = node.func
            if isinstance(func, ast.Attribute) and not (dotted_name(func) or "").split(".")[0] in API_ROOTS | {"self"}:
                visit(func.value)  # x.relu(): x first
            name = dotted_name(func)
            op = None
            if name and name.startswith("self."):
                attr = name.split(".", 1)[1]
                op = modules.get(attr)
                if op == "parameter":
                    op = None
            elif name and name.split(".")[0] in API_ROOTS:
                op = canonical(name)
            elif isinstance(func, ast.Attribute):
                op = canonical(func.attr)
            if op and op not in LAYOUT and op not in CREATION and not op.startswith("sequential"):
                ops.append(op)
            return
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            if isinstance(node, ast.BinOp):
                visit(node.left)
                visit(node.right)
            else:
                visit(node.value)
            kind = BINOPS.get(type(node.op))
            if kind:
                ops.append(kind)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in forward.body:
        visit(stmt)
    return ops


def _tokens(node, out):
    """Pre-order tokens of `node`: node types, torch's API names, nothing the author named."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return  # a docstring
    kind = type(node).__name__
    if isinstance(node, ast.Attribute):
        dotted = dotted_name(node)
        if dotted and dotted.split(".")[0] in API_ROOTS:
            out.append("api:" + canonical(dotted))
            return
        out.append(kind)
    elif isinstance(node, ast.Name):
        out.append("api:" + node.id if node.id in API_ROOTS else kind)
        return
    elif isinstance(node, ast.Constant):
        out.append("const:%s" % type(node.value).__name__)
        return
    elif isinstance(node, (ast.operator, ast.cmpop, ast.unaryop, ast.boolop)):
        out.append(kind)
        return
    elif isinstance(node, (ast.expr_context, ast.alias)):
        return
    else:
        out.append(kind)
    for child in ast.iter_child_nodes(node):
        _tokens(child, out)


def fingerprint(code, where="<code>"):
    """The sorted hashes of the normalized syntax tree's 5-grams."""
    tokens = []
    for stmt in parse(code, where).body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        _tokens(stmt, tokens)
    grams = {"\x1f".join(tokens[i:i + NGRAM]) for i in range(max(1, len(tokens) - NGRAM + 1))}
    return sorted(zlib.crc32(g.encode()) for g in grams)


def similarity(a, b):
    """The Jaccard index of two fingerprints (sets or sorted lists)."""
    a, b = set(a), set(b)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class Index:
    """KernelBench's problems as operator sequences and fingerprints."""

    def __init__(self, data, path="<index>"):
        if data.get("version") != INDEX_VERSION:
            raise ValueError("%s: index version %r, this anvil reads %d (rebuild it: python -m "
                             "anvil.synth.decontam index --kernelbench DIR)" % (path, data.get("version"), INDEX_VERSION))
        self.path = path
        self.source = data.get("source", {})
        self.problems = data["problems"]
        self.sets = [frozenset(p["fingerprint"]) for p in self.problems]
        self.by_ops = {}
        for i, p in enumerate(self.problems):
            if p["ops"] and p["level"] != "level3":  # L3's networks (containers, loops) read as fragments
                self.by_ops.setdefault(tuple(p["ops"]), []).append(i)

    @classmethod
    def load(cls, path=None):
        path = path or default_index_path()
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f), path)

    def nearest(self, fp, k=3):
        """The k most similar problems: [(similarity, problem)], most similar first."""
        fp = frozenset(fp)
        scored = sorted(((len(fp & s) / len(fp | s) if fp | s else 1.0, i) for i, s in enumerate(self.sets)),
                        reverse=True)[:k]
        return [(round(sim, 4), self.problems[i]) for sim, i in scored]

    def check(self, code, threshold=THRESHOLD, where="<code>", ops=None):
        """{contaminated, reason, ops, nearest: [{problem, level, similarity}], same_ops: [...]}"""
        ops = list(ops) if ops is not None else op_sequence(code, where)
        near = self.nearest(fingerprint(code, where))
        same = [self.problems[i] for i in self.by_ops.get(tuple(ops), [])]
        reason = None
        if same:
            reason = "kernelbench_ops"
        elif near and near[0][0] > threshold:
            reason = "kernelbench_similar"
        return {"contaminated": reason is not None, "reason": reason, "ops": ops, "threshold": threshold,
                "nearest": [{"problem": p["name"], "level": p["level"], "similarity": s} for s, p in near],
                "same_ops": ["%s/%s" % (p["level"], p["name"]) for p in same]}


def default_index_path():
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "share",
                                         "synth", "kernelbench-index.json"))


def kernelbench_problems(root):
    """(level, file name, path) of every problem of levels 1-3 under a KernelBench checkout."""
    base = os.path.join(root, "KernelBench") if os.path.isdir(os.path.join(root, "KernelBench")) else root
    found = []
    for level in LEVELS:
        folder = os.path.join(base, level)
        if not os.path.isdir(folder):
            raise CodeError("%s: no %s folder (name a KernelBench checkout)" % (base, level))
        for name in sorted(os.listdir(folder), key=lambda n: (int(n.split("_")[0]) if n.split("_")[0].isdigit() else 1 << 30, n)):
            if name.endswith(".py"):
                found.append((level, name, os.path.join(folder, name)))
    return found


def build_index(root, url=None):
    problems, skipped = [], []
    for level, name, path in kernelbench_problems(root):
        with open(path, encoding="utf-8") as f:
            code = f.read()
        try:
            problems.append({"level": level, "name": name, "ops": op_sequence(code, path),
                             "fingerprint": fingerprint(code, path)})
        except CodeError as e:
            skipped.append({"level": level, "name": name, "reason": str(e)})
    source = {"kernelbench": url or os.path.abspath(root)}
    head = _git_head(root)
    if head:
        source["commit"] = head
    return {"version": INDEX_VERSION, "ngram": NGRAM, "threshold": THRESHOLD, "source": source,
            "problems": problems, "skipped": skipped}


def _git_head(root):
    import subprocess

    try:
        r = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.synth.decontam", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ix = sub.add_parser("index", help="build the KernelBench index from a checkout")
    ix.add_argument("--kernelbench", required=True, help="a KernelBench checkout (its KernelBench/level1-3)")
    ix.add_argument("--out", default=default_index_path())
    ix.add_argument("--url", help="where the checkout came from, as the index records it (default: its path)")
    ck = sub.add_parser("check", help="check task files against the index")
    ck.add_argument("files", nargs="+")
    ck.add_argument("--index", default=None)
    ck.add_argument("--threshold", type=float, default=THRESHOLD)
    ck.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "index":
        data = build_index(args.kernelbench, args.url)
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
        os.replace(tmp, args.out)
        print("%d problems indexed, %d skipped: %s" % (len(data["problems"]), len(data["skipped"]), args.out))
        return 0
    index = Index.load(args.index)
    contaminated = 0
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            result = index.check(f.read(), args.threshold, path)
        contaminated += result["contaminated"]
        result["file"] = path
        if args.json:
            print(json.dumps(result))
        else:
            n = result["nearest"][0] if result["nearest"] else None
            print("%s: %s (ops %s; nearest %s/%s at %.3f)" % (
                path, result["reason"] or "clean", "-".join(result["ops"]) or "none",
                n["level"] if n else "-", n["problem"] if n else "-", n["similarity"] if n else 0))
    return 1 if contaminated else 0


if __name__ == "__main__":
    sys.exit(main())
