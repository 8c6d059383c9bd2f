import re
import textwrap

import pytest

from anvil import task_probe

GOOD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, scale=2.0):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.register_buffer("offset", torch.zeros(out_features, dtype=torch.float64))
        self.scale = scale

    def forward(self, x, dim):
        print("noise on stdout")
        y = self.linear(x) * self.scale
        return y, [y.sum(dim=dim).to(torch.float16)]

batch = 4

def get_inputs():
    return [torch.randn(batch, 8), 1]

def get_init_inputs():
    return [8, 16]
"""

TAIL = """
def get_inputs():
    return [torch.randn(2, 3)]

def get_init_inputs():
    return []
"""

IDENTITY = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
"""


def write(tmp_path, text, name="task.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def task_error(cli, path, *args):
    result = cli("anvil.task_probe", path, *args)
    assert result.returncode == 0, result.stderr
    out = result.json
    assert out["ok"] is False and out["outcome"] == "task_error", out
    assert out["file"] == path
    assert out["detail"]
    return out


def test_good_task(cli, tmp_path):
    path = write(tmp_path, GOOD)
    result = cli("anvil.task_probe", path)
    assert result.returncode == 0, result.stderr
    assert "noise on stdout" in result.stderr  # the task's print went to stderr, not stdout
    assert result.json == {
        "ok": True,
        "file": path,
        "seed": 0,
        "model": {
            "init_signature": "(self, in_features, out_features, scale=2.0)",
            "init_params": ["in_features", "out_features", "scale"],
            "parameters": [
                {"name": "linear.weight", "shape": [16, 8], "dtype": "float32"},
                {"name": "linear.bias", "shape": [16], "dtype": "float32"},
            ],
            "buffers": [{"name": "offset", "shape": [16], "dtype": "float64"}],
        },
        "init_inputs": [{"type": "int", "value": 8}, {"type": "int", "value": 16}],
        "inputs": [{"type": "tensor", "shape": [4, 8], "dtype": "float32"}, {"type": "int", "value": 1}],
        "output": {"type": "tuple", "items": [
            {"type": "tensor", "shape": [4, 16], "dtype": "float32"},
            {"type": "list", "items": [{"type": "tensor", "shape": [4], "dtype": "float16"}]},
        ]},
    }


def test_no_forward_and_seed(cli, tmp_path):
    path = write(tmp_path, GOOD.replace('print("noise on stdout")', 'raise RuntimeError("never run")'))
    result = cli("anvil.task_probe", path, "--no-forward", "--seed", "7")
    assert result.json["ok"] is True
    assert result.json["output"] is None
    assert result.json["seed"] == 7


def test_seed_makes_inputs_reproducible(tmp_path):
    import torch

    path = write(tmp_path, IDENTITY + "\ndef get_inputs():\n    return [torch.randn(3)]\n"
                 "def get_init_inputs():\n    return []\n")
    module = task_probe.load_task(path)
    torch.manual_seed(5)
    expected = module.get_inputs()[0]
    torch.manual_seed(5)
    assert torch.equal(module.get_inputs()[0], expected)
    assert task_probe.probe_task(path, seed=5)["ok"] is True


def test_describe_values():
    import torch

    d = task_probe.describe
    assert d(torch.float16) == {"type": "dtype", "value": "float16"}
    assert d(None) == {"type": "none"}
    assert d(True) == {"type": "bool", "value": True}
    assert d(2.5) == {"type": "float", "value": 2.5}
    assert d("mean") == {"type": "str", "value": "mean"}
    assert d((1, torch.ones(2, 3, dtype=torch.int64))) == {"type": "tuple", "items": [
        {"type": "int", "value": 1}, {"type": "tensor", "shape": [2, 3], "dtype": "int64"}]}
    assert d(torch.tensor(1.0)) == {"type": "tensor", "shape": [], "dtype": "float32"}
    assert d(object())["type"] == "object"


def test_nonfinite_floats_are_strict_json(cli, tmp_path):
    path = write(tmp_path, """
        import torch
        class Model(torch.nn.Module):
            def __init__(self, eps):
                super().__init__()
            def forward(self, x):
                return x
        def get_inputs():
            return [torch.randn(2)]
        def get_init_inputs():
            return [float("nan"), float("-inf")]
        """)
    result = cli("anvil.task_probe", path, "--no-forward")
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    assert result.json["ok"] is False  # two args for a one-arg constructor
    assert result.json["cause"].startswith(path + ": Model(*get_init_inputs()) raised TypeError: ")


def test_file_not_found(cli, tmp_path):
    path = str(tmp_path / "missing.py")
    assert task_error(cli, path)["cause"] == "task file not found: " + path


def test_syntax_error_names_the_line(cli, tmp_path):
    path = write(tmp_path, "import torch\n\nclass Model(torch.nn.Module)\n    pass\n")
    out = task_error(cli, path)
    assert re.fullmatch(re.escape(path) + r":3: syntax error: .+", out["cause"]), out["cause"]
    assert "SyntaxError" in out["detail"]


def test_import_raises(cli, tmp_path):
    path = write(tmp_path, "import torch\nimport no_such_module_for_anvil\n")
    out = task_error(cli, path)
    assert out["cause"] == (path + ": importing the task raised ModuleNotFoundError: "
                            "No module named 'no_such_module_for_anvil'")
    assert 'line 2, in <module>' in out["detail"]
    assert "task_probe.py" not in out["detail"]  # the probe's own frames are left out


def test_import_calls_exit(cli, tmp_path):
    path = write(tmp_path, "import sys\nsys.exit(3)\n")
    assert task_error(cli, path)["cause"] == path + ": importing the task raised SystemExit: 3"


def test_no_model_class(cli, tmp_path):
    path = write(tmp_path, "import torch\n" + TAIL)
    assert task_error(cli, path)["cause"] == path + ": no class `Model` defined"


def test_model_not_a_module(cli, tmp_path):
    path = write(tmp_path, "import torch\nclass Model:\n    pass\n" + TAIL)
    assert task_error(cli, path)["cause"] == (
        path + ": `Model` is not a torch.nn.Module subclass (it is class Model)")
    path = write(tmp_path, "import torch\nModel = 3\n" + TAIL, "int.py")
    assert task_error(cli, path)["cause"] == (
        path + ": `Model` is not a torch.nn.Module subclass (it is int)")


@pytest.mark.parametrize("name", ["get_inputs", "get_init_inputs"])
def test_missing_input_function(cli, tmp_path, name):
    text = IDENTITY + TAIL.replace("def %s(" % name, "def renamed_%s(" % name)
    path = write(tmp_path, text)
    assert task_error(cli, path)["cause"] == "%s: no function `%s` defined" % (path, name)


def test_input_function_not_callable(cli, tmp_path):
    path = write(tmp_path, IDENTITY + TAIL + "\nget_inputs = [1]\n")
    assert task_error(cli, path)["cause"] == path + ": `get_inputs` is not a function (it is a list)"


@pytest.mark.parametrize("name", ["get_inputs", "get_init_inputs"])
def test_input_function_raises(cli, tmp_path, name):
    text = IDENTITY + TAIL.replace("def %s():\n" % name, "def %s():\n    raise ValueError('bad shape')\n" % name)
    path = write(tmp_path, text)
    out = task_error(cli, path)
    assert out["cause"] == "%s: %s() raised ValueError: bad shape" % (path, name)
    assert "in %s" % name in out["detail"]


@pytest.mark.parametrize("name", ["get_inputs", "get_init_inputs"])
def test_input_function_returns_non_list(cli, tmp_path, name):
    text = IDENTITY + TAIL.replace("def %s():\n" % name, "def %s():\n    return {'x': 1}\n" % name)
    path = write(tmp_path, text)
    assert task_error(cli, path)["cause"] == (
        "%s: %s() returned dict, expected a list or tuple" % (path, name))


def test_model_construction_raises(cli, tmp_path):
    path = write(tmp_path, textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                raise RuntimeError("cannot build")
        """) + TAIL)
    out = task_error(cli, path)
    assert out["cause"] == path + ": Model(*get_init_inputs()) raised RuntimeError: cannot build"
    assert "in __init__" in out["detail"]


def test_forward_raises(cli, tmp_path):
    path = write(tmp_path, textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return x @ torch.ones(4, 4)
        """) + TAIL)
    out = task_error(cli, path)
    assert out["cause"] == (path + ": Model.forward(*get_inputs()) raised RuntimeError: "
                            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x4)")
    assert out["detail"].startswith("Traceback (most recent call last):\n  File \"%s\"" % path)
    assert len(out["detail"].splitlines()) <= 15


def test_usage_error_is_json(cli):
    result = cli("anvil.task_probe")
    assert result.returncode == 2
    assert result.json["ok"] is False and result.json["outcome"] == "usage_error"
    assert "required: file" in result.json["cause"]
