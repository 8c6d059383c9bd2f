"""anvil.family: a task's kernel family from the operations its code names (the benchmark's
per-family tables). No torch: the helper reads code, it does not run it."""
import json
import os
import subprocess
import sys

import pytest

from anvil import family

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def task(init, forward, extra=""):
    return ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n%s\n"
            "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n%s\n"
            "    def forward(self, x):\n%s\n" % (extra, init or "        pass", forward))


CASES = [
    ("conv then epilogue", task("        self.conv = nn.Conv2d(3, 8, 3)", "        return torch.relu(self.conv(x)) + 1"),
     "convolution"),
    ("linear then softmax", task("        self.fc = nn.Linear(8, 8)", "        return torch.softmax(self.fc(x), dim=1)"),
     "GEMM"),
    ("matmul written as @", task(None, "        return x @ x.t()"), "GEMM"),
    ("attention by hand", task(None, "        a = torch.softmax(x @ x.transpose(-1, -2), dim=-1)\n        return a @ x"),
     "attention"),
    ("sdpa", task(None, "        return F.scaled_dot_product_attention(x, x, x)"), "attention"),
    ("recurrent", task("        self.rnn = nn.LSTM(8, 8)", "        return self.rnn(x)[0]"), "composite"),
    ("a network in a Sequential", task(
        "        self.f = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())\n        self.fc = nn.Linear(8, 2)",
        "        return self.fc(self.f(x).mean((2, 3)))"), "composite"),
    ("a loss", task(None, "        return F.cross_entropy(x, x.argmax(1))"), "reduction/normalization"),
    ("a norm", task("        self.n = nn.LayerNorm(8)", "        return self.n(x)"), "reduction/normalization"),
    ("pooling", task(None, "        return F.max_pool2d(x, 2)"), "reduction/normalization"),
    ("activations", task(None, "        return F.gelu(x) * torch.sigmoid(x)"), "elementwise/activation"),
]


@pytest.mark.parametrize("what,code,expected", CASES, ids=[c[0] for c in CASES])
def test_each_family_is_found_from_the_ops(what, code, expected):
    ops = family.named_ops(code)
    assert family.family_of(ops) == expected, (what, ops)
    assert expected in family.FAMILIES


def test_the_bundled_tasks_have_their_families(tmp_path):
    got = {os.path.basename(r["spec"]): r["family"] for r in (
        family.classify(os.path.join(ROOT, "examples", "tasks", f))
        for f in sorted(os.listdir(os.path.join(ROOT, "examples", "tasks"))))}
    assert got == {
        "01_elementwise_chain.py": "elementwise/activation", "02_softmax.py": "reduction/normalization",
        "03_layernorm.py": "reduction/normalization", "04_gemm_bias_relu.py": "GEMM",
        "05_conv_bias_relu.py": "convolution", "06_mlp_block.py": "GEMM",
    }


def test_a_task_that_cannot_be_read_is_unknown_with_its_reason(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class Model(:\n")
    r = family.classify(str(bad))
    assert r["family"] == family.UNKNOWN and "not valid Python" in r["error"]
    r = family.classify(str(tmp_path / "missing.py"))
    assert r["family"] == family.UNKNOWN and "missing.py" in r["error"]
    r = family.classify(str(tmp_path / "rows.jsonl") + "#3")
    assert r["family"] == family.UNKNOWN and "not found" in r["error"]


def test_the_command_reads_files_and_dataset_rows(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"ops": ["nn.Conv2d"], "data_source": "x", "code": CASES[0][1]}) + "\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-m", "anvil.family", str(rows) + "#0",
                        os.path.join(ROOT, "examples", "tasks", "04_gemm_bias_relu.py")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["tasks"]
    assert [t["family"] for t in out] == ["convolution", "GEMM"]
    assert out[0]["ops"][:2] == ["conv2d", "relu"]
    r = subprocess.run([sys.executable, "-m", "anvil.family"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "SPEC" in r.stderr
