"""The load_inline builds of a single-file candidate, read from its source without running it, so
they can be built on every core before its evaluation (which then finds them in the build cache).

    python -m anvil.ahead --out DIR FILE

reads FILE with `ast` (nothing of it is executed or imported), finds its load_inline calls whose
arguments are literals or module-level names bound to literals (strings, their concatenations and
f-strings of such, lists, tuples, dicts, True/False/None), writes each call's sources into DIR/<i>/
exactly as anvil.load_inline writes them, and prints one JSON object:

    {"builds": [{"name", "sources": [paths], "cflags", "cuda_cflags", "ldflags", "include_dirs"}],
     "skipped": [{"line", "why"}]}

A call whose arguments are computed (a function's result, a name bound twice, **kwargs) is skipped
with its reason: the evaluation builds it as before. What is built here is only a head start: the
evaluation builds what the candidate's process really asks for, and the cache key is the sources and
flags, so a spec read wrongly here costs a wasted build, never a wrong module.
"""
import argparse
import ast
import json
import os
import sys

from anvil import load_inline as li

# torch.utils.cpp_extension.load_inline's parameters, in order (positional calls map onto them).
PARAMETERS = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
              "extra_ldflags", "extra_include_paths", "build_directory", "verbose", "with_cuda",
              "is_python_module", "with_pytorch_error_handling", "keep_intermediates", "use_pch",
              "no_implicit_headers")
# Those that shape the module; the rest (verbose, build_directory, ...) need not be literals.
SHAPING = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
           "extra_ldflags", "extra_include_paths", "is_python_module", "with_pytorch_error_handling",
           "no_implicit_headers")
MAX_SOURCE = 4 << 20  # what a candidate's file may hold (larger is not a KernelBench file)
MAX_TEXT = 16 << 20   # what an evaluated string may grow to ("x" * 10**9 is not read)
# What one file may have built ahead: a KernelBench file has one to three modules. A call past these
# (a thousand load_inline calls in a function never called, one 16 MiB source sixty times over) is
# left to its evaluation, whose own time limit bounds it.
MAX_BUILDS = 8
MAX_WRITTEN = 64 << 20


class NotLiteral(Exception):
    """The expression is not one this reader evaluates."""


class Reader:
    def __init__(self, tree):
        # Module-level names bound exactly once by a plain assignment; a name bound twice, or
        # bound by anything else (a loop, an import, a function), is not known here.
        counts, self.bound = {}, {}
        for node in tree.body:
            for target, value in assignments(node):
                counts[target] = counts.get(target, 0) + 1
                self.bound[target] = value
            for name in other_bindings(node):
                counts[name] = counts.get(name, 0) + 2
        self.bound = {k: v for k, v in self.bound.items() if counts[k] == 1}
        self.resolving = set()

    def value(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.bound or node.id in self.resolving:
                raise NotLiteral("%s is not a name bound once to a literal" % node.id)
            self.resolving.add(node.id)
            try:
                return self.value(self.bound[node.id])
            finally:
                self.resolving.discard(node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            if type(left) is not type(right) or not isinstance(left, (str, list)):
                raise NotLiteral("a + of %s and %s" % (type(left).__name__, type(right).__name__))
            return self.bounded(left + right)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(v.value)
                elif isinstance(v, ast.FormattedValue) and v.conversion == -1 and v.format_spec is None:
                    inner = self.value(v.value)
                    if not isinstance(inner, (str, int)) or isinstance(inner, bool):
                        raise NotLiteral("an f-string of a %s" % type(inner).__name__)
                    parts.append(str(inner))
                else:
                    raise NotLiteral("an f-string with a conversion or format")
            return self.bounded("".join(parts))
        raise NotLiteral("a %s" % type(node).__name__)

    @staticmethod
    def bounded(v):
        if len(v) > MAX_TEXT:
            raise NotLiteral("a value larger than %d" % MAX_TEXT)
        return v


def assignments(node):
    """(name, value) of a plain module-level `name = value` (or `name: T = value`)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        yield node.targets[0].id, node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        yield node.target.id, node.value


def other_bindings(node):
    """Names a module-level statement binds other than by a plain assignment (they are not known)."""
    if isinstance(node, ast.Assign) and not (len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    elif isinstance(node, (ast.With, ast.AsyncWith, ast.If, ast.While, ast.Try)):
        names = []
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.append(child.id)
        return names
    else:
        return []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def is_load_inline(call):
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "load_inline") or \
        (isinstance(f, ast.Attribute) and f.attr == "load_inline")


def call_spec(reader, call):
    """The load_inline arguments that shape the module, or NotLiteral."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise NotLiteral("*args or **kwargs")
    if len(call.args) > len(PARAMETERS):
        raise NotLiteral("more positional arguments than load_inline takes")
    given = dict(zip(PARAMETERS, call.args))
    for k in call.keywords:
        if k.arg in ("is_standalone", "sycl_sources"):
            raise NotLiteral("%s is not built by anvil" % k.arg)
        given[k.arg] = k.value
    if "name" not in given or "cpp_sources" not in given:
        raise NotLiteral("no name or cpp_sources")
    args = {k: reader.value(v) for k, v in given.items() if k in SHAPING}
    return args


def text_list(value, what):
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in items):
        raise NotLiteral("%s that are not strings" % what)
    if sum(len(v) for v in items) > MAX_TEXT:  # a list of one long string many times over is not joined
        raise NotLiteral("%s larger than %d" % (what, MAX_TEXT))
    return items


def harvest(source, out_dir):
    """(builds, skipped) of a candidate's source text; see the module's doc."""
    builds, skipped = [], []
    if len(source) > MAX_SOURCE:
        return builds, [{"line": 0, "why": "the file is larger than %d bytes" % MAX_SOURCE}]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return builds, [{"line": 0, "why": "the file does not parse: %s" % e}]
    reader = Reader(tree)
    written = 0
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and is_load_inline(n)),
                   key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        try:
            a = call_spec(reader, call)
            name = a["name"]
            why = li.name_error(name)
            if why is not None:
                raise NotLiteral(why)
            cpp = text_list(a["cpp_sources"], "cpp_sources")
            cuda = text_list(a.get("cuda_sources") or [], "cuda_sources")
            cpp_text, cuda_text = li.source_texts(cpp, cuda, a.get("functions"),
                                                  bool(a.get("with_pytorch_error_handling", True)),
                                                  bool(a.get("no_implicit_headers", False)))
            flags = {key: [v for v in text_list(a.get(arg) or [], arg) if v.strip()]
                     for key, arg in (("cflags", "extra_cflags"), ("cuda_cflags", "extra_cuda_cflags"),
                                      ("ldflags", "extra_ldflags"), ("include_dirs", "extra_include_paths"))}
        except (NotLiteral, ValueError, TypeError, RecursionError) as e:
            skipped.append({"line": call.lineno, "why": str(e) or type(e).__name__})
            continue
        size = len(cpp_text) + len(cuda_text or "")
        if len(builds) == MAX_BUILDS or written + size > MAX_WRITTEN:
            skipped.append({"line": call.lineno, "why": "past what one file may have built ahead (%d modules, %d "
                                                        "bytes of sources)" % (MAX_BUILDS, MAX_WRITTEN)})
            continue
        written += size
        directory = os.path.join(out_dir, str(len(builds)))
        os.makedirs(directory, exist_ok=True)
        builds.append(dict(name=name, sources=li.write_sources(directory, cpp_text, cuda_text), **flags))
    return builds, skipped


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where the sources are written")
    ap.add_argument("file", help="a single-file candidate (model_new.py)")
    a = ap.parse_args(argv)
    try:
        with open(a.file, encoding="utf-8", errors="replace") as f:
            source = f.read(MAX_SOURCE + 1)
    except OSError as e:
        print(json.dumps({"builds": [], "skipped": [{"line": 0, "why": "cannot read %s: %s" % (a.file, e)}]}))
        return 0
    builds, skipped = harvest(source, a.out)
    print(json.dumps({"builds": builds, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
