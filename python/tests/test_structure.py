"""The Python package's shape (issue 22): no module of anvil imports, at any depth and however
lazily, one that imports it back."""
import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "anvil")


def imports_of(path):
    """The anvil modules a file imports, at its top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "anvil":
            if node.module == "anvil":
                found |= {alias.name for alias in node.names}
            else:
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("anvil.")}
    return found


def graph():
    names = {f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py")}
    return {name: (imports_of(os.path.join(PACKAGE, name + ".py")) & names) - {name} for name in names}


def circles(edges):
    """Every module that can reach itself, with one path back."""
    found = {}
    for start in edges:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt == start:
                    found.setdefault(start, path + [start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_no_module_imports_itself_back():
    found = circles(graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(p) for p in found.values())


def test_the_check_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}).keys() == {"a", "b", "c"}
    assert not circles({"a": {"b"}, "b": set()})


SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
MAX_FUNCTION_LINES = 120


def function_lengths(text):
    """(first line, lines, signature) of each function defined at namespace scope in C++ source laid
    out as anvil's is (clang-format): a signature that starts in column 0, its body's `{` ending its
    last line, its closing `}` in column 0. A lambda or a class's inline members count as part of
    what holds them."""
    lines = text.split("\n")
    found, i = [], 0
    while i < len(lines):
        line = lines[i]
        starts = line[:1] not in ("", " ", "}", "#", "/", "\t") and "(" in line and \
            not line.startswith(("namespace", "struct", "class", "enum", "using", "extern", "template", "static_assert"))
        if starts:
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                found.append((i + 1, k - i + 1, line.strip()[:80]))
                i = k
        i += 1
    return found


def test_no_function_in_src_is_over_120_lines():
    long = []
    for root, _dirs, files in os.walk(SRC):
        for name in files:
            if name.endswith(".cpp") and not name.endswith("_test.cpp"):
                path = os.path.join(root, name)
                long += ["%s:%d %s (%d lines)" % (os.path.relpath(path, SRC), at, sig, n)
                         for at, n, sig in function_lengths(open(path).read()) if n > MAX_FUNCTION_LINES]
    assert not long, "functions over %d lines:\n" % MAX_FUNCTION_LINES + "\n".join(long)


def test_the_length_check_sees_a_long_function():
    body = "  x();\n" * 130
    text = "namespace a {\n\nint f(int y,\n      int z) {\n" + body + "}\n\nvoid g() {\n  y();\n}\n\n}  // namespace a\n"
    assert [(n, sig) for _at, n, sig in function_lengths(text)] == [(133, "int f(int y,"), (3, "void g() {")]
