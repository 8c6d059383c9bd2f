"""bench/suite/make_suite.py: the generated suite's layout, manifest, faults and determinism.

Generation only (no builds, no torch): a small suite with --faults, twice with one seed and once
with another."""
import ast
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR

SCRIPT = os.path.join(os.path.dirname(PYTHON_DIR), "bench", "suite", "make_suite.py")
STEM = re.compile(r"^(\d+)_([A-Za-z0-9_]+)$")
N_TASKS = 10


def generate(out, *args):
    proc = subprocess.run([sys.executable, SCRIPT, "--out", str(out)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def snapshot(root):
    """{relative path: ("file", bytes, mode) or ("link", target)} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", f.read(), os.stat(path).st_mode & 0o777)
    return out


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    base = tmp_path_factory.mktemp("bench_suite")
    stdout = generate(base / "a", "--tasks", N_TASKS, "--faults", "--seed", 3)
    generate(base / "b", "--tasks", N_TASKS, "--faults", "--seed", 3)
    generate(base / "c", "--tasks", N_TASKS, "--faults", "--seed", 4)
    generate(base / "clean", "--tasks", N_TASKS, "--seed", 3)
    with open(base / "a" / "manifest.json") as f:
        manifest = json.load(f)
    return {"base": base, "root": base / "a", "stdout": stdout, "manifest": manifest}


def test_deterministic(suite):
    base = suite["base"]
    a, b = snapshot(base / "a"), snapshot(base / "b")
    assert a == b
    c = snapshot(base / "c")
    assert a != c  # another seed, another suite


def test_refuses_to_overwrite(suite, tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "--out", str(suite["root"]), "--tasks", str(N_TASKS)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "--force" in proc.stderr


def test_layout_and_names(suite):
    root, manifest = suite["root"], suite["manifest"]
    tasks = manifest["tasks"]
    assert len(tasks) == N_TASKS
    assert manifest["levels"] == {"level1": 6, "level2": 4}
    for level in ("level1", "level2"):
        ids = [t["id"] for t in tasks if t["level"] == level]
        assert ids == list(range(1, len(ids) + 1))
        files = sorted(os.listdir(root / "tasks" / level))
        for name in files:
            assert name.endswith(".py") and STEM.match(name[:-3]), name
    stems = set()
    for t in tasks:
        assert t["stem"] == "%d_%s" % (t["id"], t["name"])
        assert STEM.match(t["stem"])
        assert (t["level"], t["name"]) not in stems
        stems.add((t["level"], t["name"]))
        assert t["task"] == "tasks/%s/%s.py" % (t["level"], t["stem"])
        path = root / t["task"]
        assert path.is_file() and not path.is_symlink()
        assert t["family"] in ("elementwise_unary", "elementwise_binary", "row_reduction", "row_softmax",
                               "row_norm", "elementwise_chain", "gemm_epilogue", "row_epilogue")
        n_ops = len(t["ops"])
        assert n_ops == 1 if t["level"] == "level1" else 2 <= n_ops <= 5
        assert t["shapes"]["inputs"]["x"] and t["shapes"]["output"]


def test_task_files_are_kernelbench(suite):
    root = suite["root"]
    for t in suite["manifest"]["tasks"]:
        with open(root / t["task"]) as f:
            source = f.read()
        tree = ast.parse(source)
        names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert {"Model", "get_inputs", "get_init_inputs"} <= names, t["stem"]
        assert "torch.randn(" in source and ".cuda(" not in source and "device=" not in source
        assert "BROKEN" not in source  # faults live in solutions only


def test_solutions(suite):
    root = suite["root"]
    for t in suite["manifest"]["tasks"]:
        if t["fault"] == "missing":
            assert t["solution"] is None
            assert not (root / "solutions" / t["level"] / t["stem"]).exists()
            continue
        sol = root / t["solution"]
        assert t["solution"] == "solutions/%s/%s" % (t["level"], t["stem"])
        with open(root / t["task"]) as f:
            task_tree = ast.parse(f.read())
        model_init = next(n for n in ast.walk(task_tree) if isinstance(n, ast.ClassDef) and n.name == "Model")
        model_args = [a.arg for a in next(f for f in model_init.body if f.name == "__init__").args.args]
        for variant in ("cuda", "cpu"):
            work = sol / variant
            kernels = sorted(os.listdir(work / "kernels"))
            assert any(k.endswith("_binding.cpp") for k in kernels), kernels
            with open(work / "model_new.py") as f:
                model_new = f.read()
            cls = next(n for n in ast.walk(ast.parse(model_new)) if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
            init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            assert [a.arg for a in init.args.args] == model_args
            forward = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
            assert "cuda_extension.%s(" % t["function"] in ast.unparse(forward)
            for k in kernels:
                with open(work / "kernels" / k) as f:
                    text = f.read()
                if k.endswith("_binding.cpp"):
                    assert "#include <anvil/binding.h>" in text and "torch" not in text
                    assert "ANVIL_REGISTER(%s);" % t["function"] in text
            if variant == "cuda":
                assert any(k.endswith(".cu") for k in kernels)
                if "gemm" in t["ops"]:
                    assert "sgemm.cpp" in kernels
            else:
                assert not any(k.endswith(".cu") for k in kernels)
                assert "parallel_rows.h" in kernels


def read_sources(work):
    text = ""
    for k in sorted(os.listdir(work / "kernels")):
        with open(work / "kernels" / k) as f:
            text += f.read()
    return text


def test_faults(suite):
    root, manifest = suite["root"], suite["manifest"]
    faults = manifest["faults"]
    kinds = sorted(f["kind"] for f in faults)
    assert kinds == sorted(["wrong_answer", "wrong_answer", "compile_error", "runtime_error", "missing", "missing",
                            "extra", "unreadable"])
    by_task = {(t["level"], t["id"]): t for t in manifest["tasks"]}
    for f in faults:
        if f["kind"] in ("extra", "unreadable"):
            assert (f["level"], f["id"]) not in by_task
            continue
        t = by_task[(f["level"], f["id"])]
        assert t["fault"] == f["kind"] == t["expected_outcome"]
        if f["kind"] == "missing":
            continue
        for variant in ("cuda", "cpu"):
            src = read_sources(root / t["solution"] / variant)
            assert "BROKEN ON PURPOSE (%s)" % f["kind"] in src
            marker = {"wrong_answer": "+ 0.0625f", "compile_error": "kUndeclaredScale",
                      "runtime_error": "ANVIL_CHECK(x.numel() < 0"}[f["kind"]]
            assert marker in src
    broken = {(t["level"], t["id"]) for t in manifest["tasks"] if t["fault"]}
    assert len(broken) == 6
    for t in manifest["tasks"]:
        if not t["fault"]:
            assert t["expected_outcome"] == "ok"
            for variant in ("cuda", "cpu"):
                assert "BROKEN" not in read_sources(root / t["solution"] / variant)
    # The extra folder: a full solution under an id no task has.
    (extra,) = manifest["extra_solutions"]
    assert extra["id"] not in [t["id"] for t in manifest["tasks"] if t["level"] == "level1"]
    assert (root / extra["path"] / "cuda" / "model_new.py").is_file()
    assert (root / extra["path"] / "cpu" / "model_new.py").is_file()
    # The unreadable task: a dangling symbolic link named like a task.
    (bad,) = manifest["unreadable_tasks"]
    path = root / bad["path"]
    assert path.is_symlink() and not path.exists()
    assert STEM.match(path.name[:-3])
    for f in faults:
        assert "%s/%s" % (f["level"], f["stem"]) in suite["stdout"]


def test_without_faults_everything_is_solved(suite):
    clean = suite["base"] / "clean"
    with open(clean / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["faults"] == [] and manifest["extra_solutions"] == [] and manifest["unreadable_tasks"] == []
    assert all(t["fault"] is None and t["solution"] for t in manifest["tasks"])
    # The same tasks as the faulted suite of the same seed: faults touch solutions only.
    a, c = snapshot(suite["root"] / "tasks"), snapshot(clean / "tasks")
    assert {k: v for k, v in a.items() if v[0] == "file"} == c
    for t in manifest["tasks"]:
        for variant in ("cuda", "cpu"):
            assert "BROKEN" not in read_sources(clean / t["solution"] / variant)


def test_full_suite_shape(tmp_path):
    generate(tmp_path / "full")
    with open(tmp_path / "full" / "manifest.json") as f:
        manifest = json.load(f)
    tasks = manifest["tasks"]
    assert len(tasks) == 100 and manifest["levels"] == {"level1": 60, "level2": 40}
    families = {t["family"] for t in tasks}
    assert families == {"elementwise_unary", "elementwise_binary", "row_reduction", "row_softmax", "row_norm",
                        "elementwise_chain", "gemm_epilogue", "row_epilogue"}
    ops = {op for t in tasks for op in t["ops"]}
    assert {"relu", "leaky_relu", "gelu", "sigmoid", "tanh", "silu", "hardtanh", "clamp", "scale", "bias",
            "softmax", "log_softmax", "sum", "mean", "max", "layernorm", "rmsnorm", "gemm"} <= ops
    # Every task file differs (distinct hashes).
    sources = set()
    for t in tasks:
        with open(tmp_path / "full" / t["task"], "rb") as f:
            sources.add(f.read())
    assert len(sources) == 100
    for t in tasks:
        if "gemm" in t["ops"]:
            m, k = t["shapes"]["inputs"]["x"]
            n = t["shapes"]["output"][-1]
            assert m * n * k <= 1 << 30
        else:
            numel = 1
            for d in t["shapes"]["inputs"]["x"]:
                numel *= d
            assert (1 << 20) <= numel <= (1 << 24)
