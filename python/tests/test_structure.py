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
