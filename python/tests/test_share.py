"""share/protocol.json is the one home of the tolerance presets, the protocols' rules and the timing's
defaults: the runner and vetting read it (anvil.share), the C++ compiles it in (protocol_test.cpp checks
that copy against the file)."""
import json
import os
import shutil

import pytest

from anvil import runner, share, vet

TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An ANVIL_HOME whose share/protocol.json the test may edit."""
    shutil.copytree(os.path.join(TREE, "share"), tmp_path / "share")
    monkeypatch.setenv("ANVIL_HOME", str(tmp_path))
    share._protocol_file.cache_clear()
    yield tmp_path
    share._protocol_file.cache_clear()


def edit(home, change):
    path = home / "share" / "protocol.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    share._protocol_file.cache_clear()


def test_the_presets_and_defaults_are_the_files():
    assert share.tolerance("strict") == {"preset": "strict",
                                         "float32": {"atol": 1e-4, "rtol": 1e-4, "norm": 1e-5},
                                         "float16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-3},
                                         "bfloat16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-2},
                                         "float64": {"atol": 1e-7, "rtol": 1e-7, "norm": 1e-9}}
    assert share.tolerance("kernelbench")["float32"] == {"atol": 1e-4, "rtol": 1e-4, "norm": None}
    assert share.default_tolerance() == share.tolerance("strict")
    assert share.rules() == {"name": "cuda-agent", "torch_ops": False, "own_work": True, "weights": "by_name"}
    assert share.rules("kernelbench")["weights"] == "by_name_or_seed"
    assert share.timing() == {"warmup": 10, "calls": 30, "input_sets": 4}
    with pytest.raises(KeyError):
        share.tolerance("lenient")


def test_a_copy_handed_out_cannot_change_the_rules():
    share.tolerance("strict")["float32"]["atol"] = 1.0
    assert share.tolerance("strict")["float32"]["atol"] == 1e-4


def test_the_runner_and_vetting_take_their_defaults_from_the_file(home, tmp_path):
    edit(home, lambda d: (d["tolerance_presets"]["strict"]["float32"].update(atol=0.5), d["timing"].update(warmup=3)))
    req = runner.parse_request(json.dumps({"protocol": runner.PROTOCOL, "task_file": "model.py",
                                           "candidate_dir": str(tmp_path)}))
    assert req["tolerance"]["float32"]["atol"] == 0.5
    assert req["timing"]["warmup"] == 3 and req["timing"]["calls"] == 30
    assert req["rules"]["name"] == "cuda-agent"
    req = runner.parse_request(json.dumps({"protocol": runner.PROTOCOL, "task_file": "model.py",
                                           "candidate_dir": str(tmp_path), "timing": {"measure": [], "calls": 7}}))
    assert req["timing"]["measure"] == [] and req["timing"]["calls"] == 7 and req["timing"]["warmup"] == 3
    v = vet.parse_request(json.dumps({"task_file": "model.py"}))
    assert v["tolerance"]["float32"]["atol"] == 0.5


def test_a_missing_file_is_named(home):
    os.remove(home / "share" / "protocol.json")
    share._protocol_file.cache_clear()
    with pytest.raises(RuntimeError, match="cannot read anvil's judging rules .*protocol.json"):
        share.tolerance("strict")
