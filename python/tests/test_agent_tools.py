"""The agent's profile_reference and tune tools in a real episode: the built `anvil agent` against
tests/replay_server.py, real builds and evaluations on the CPU; only the model's words are scripted.
The first turn sees the reference's profile; tune judges one evaluation per launch configuration with
ModelNew's `config` set to each value (a value whose forward raises is that row's runtime_error), says
what a ModelNew without one lacks, and refuses bad values before judging anything."""
import json
import os

import pytest

import scripted_agent

ROOT = scripted_agent.ROOT
pytestmark = pytest.mark.skipif(not os.access(scripted_agent.ANVIL, os.X_OK), reason="build/anvil is not built")

CONFIG_MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))
        self.config = 0

    def forward(self, x):
        if self.config == 3:
            raise RuntimeError("config 3: no such launch configuration")
        return cuda_extension.elementwise_chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
'''


def tool_results(record):
    """The tool messages' contents, in order, with the name of the call each answers."""
    names = {}
    for m in record["messages"]:
        for c in m.get("tool_calls") or []:
            names[c["id"]] = c["function"]["name"]
    return [(names.get(m.get("tool_call_id")), m["content"]) for m in record["messages"] if m["role"] == "tool"]


@pytest.fixture(scope="module")
def episode(tmp_path_factory, small_task):
    writes = [call for turn in scripted_agent.solving_turns() for call in turn["tool_calls"]
              if call["name"] == "write_file"]
    call = scripted_agent.call
    turns = [
        {"content": "Where does the reference spend its time?", "tool_calls": [call("profile_reference", {})]},
        {"content": None, "tool_calls": writes},
        {"content": None, "tool_calls": [call("compile", {}), call("tune", {"configs": [0, 1]})]},
        {"content": None, "tool_calls": [call("write_file", {"path": "model_new.py", "content": CONFIG_MODEL_NEW})]},
        {"content": None, "tool_calls": [call("tune", {"configs": [0, 3, 1]}), call("tune", {"configs": [2, -1]}),
                                         call("tune", {"configs": [4, 4]}), call("tune", {"configs": []})]},
        {"content": "Done.", "tool_calls": [call("finish", {"summary": "fused, tuned"})]},
    ]
    out = tmp_path_factory.mktemp("tools")
    proc, files = scripted_agent.run_agent(str(out), small_task, turns)
    assert proc.returncode == 0 and len(files) == 1, proc.stderr[-3000:]
    record = json.load(open(files[0]))
    return record, tool_results(record)


def test_the_first_turn_sees_the_references_profile(episode):
    record, results = episode
    name, text = results[0]
    assert name == "profile_reference"
    assert text.startswith("The reference (model.py's Model) on the CPU, median of"), text
    assert "eager " in text and "torch.compile  not measured (compile mode none)" in text, text
    assert "To earn 2 (more than 5% faster than eager): under" in text, text
    assert "inputs 131.1 KB, parameters 1.0 KB, outputs 131.1 KB" in text, text  # 128 x 256 float32, bias 256
    assert "eager's time by op" in text and "aten::gelu" in text, text
    assert "profile_reference" in record["tools"][0]["function"]["name"] or any(
        t["function"]["name"] == "profile_reference" for t in record["tools"])


def test_tune_judges_each_configuration_and_names_the_fastest(episode):
    _record, results = episode
    tunes = [text for name, text in results if name == "tune"]
    assert len(tunes) == 5, tunes
    no_config, swept, negative, twice, empty = tunes
    # The bundled candidate sets no self.config: the first row is the load_error that says so, and no other
    # value is tried (each would fail alike).
    assert no_config.splitlines()[1].split()[:2] == ["0", "load_error"], no_config
    assert "no configuration was correct" in no_config, no_config
    assert "tune needs ModelNew.__init__ to set an integer self.config" in no_config, no_config
    assert "1 configuration(s) not tried: every value would fail the same way" in no_config, no_config
    rows = {line.split()[0]: line.split()[1] for line in swept.splitlines()[1:4]}
    assert rows == {"0": "ok", "3": "runtime_error", "1": "ok"}, swept
    assert "config 3: no such launch configuration" in swept, swept  # the value reached forward
    best = swept.split("fastest correct: config ")[1].split()[0]
    assert best in ("0", "1"), swept
    assert "set self.config = %s in ModelNew.__init__" % best in swept, swept
    # Bad values are refused before anything is judged.
    assert negative.startswith("error: tune: configs: -1 is not an integer from 0 to 2^31-1"), negative
    assert twice.startswith("error: tune: configs: 4 is given twice"), twice
    assert empty.startswith("error: tune: configs: give 1 to 16 values (got 0)"), empty


def test_tunes_record_carries_one_outcome_for_the_training_filter(episode):
    """anvil rft drops an episode whose verify, profile or tune said hack_suspected: tune's detail has
    one outcome, as theirs do (hack_suspected when any row is, ok when one was correct)."""
    record, _results = episode
    details = [c.get("detail") or {} for t in record["turns"] for c in t["tool_calls"] if c["name"] == "tune"]
    assert [d.get("outcome") for d in details] == ["load_error", "ok", None, None, None], details
    assert [r["outcome"] for r in details[1]["rows"]] == ["ok", "runtime_error", "ok"]


def test_the_final_judgement_uses_modelnews_own_config(episode):
    record, _results = episode
    ev = record["evaluation"]
    assert ev["outcome"] == "ok" and record["reward"] >= 1, json.dumps(ev)[:2000]
    assert "config" not in ev["candidate"]  # the judge sets none: ModelNew's own 0


def test_anvil_task_profile_prints_the_same_profile(small_task, tmp_path):
    """`anvil task profile`: the reference's profile for a user, as text and as JSON; a task whose
    reference raises exits 1 naming the error, a bad device exits 2 (CLI11's refusal)."""
    import subprocess

    env = dict(os.environ, ANVIL_PYTHON=os.environ.get("ANVIL_PYTHON") or scripted_agent.sys.executable)
    base = [scripted_agent.ANVIL, "task", "profile", small_task, "--device", "cpu", "--compile-mode", "none",
            "--calls", "3", "--warmup", "1"]
    r = subprocess.run(base + ["--json"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    j = json.loads(r.stdout)
    assert j["status"] == "done" and j["device"] == "cpu" and j["compile"] is None
    assert j["work"]["bytes"] == 4 * (128 * 256 * 2 + 256) and j["task"]["name"] == "01_small"
    text = subprocess.run(base, capture_output=True, text=True, env=env, timeout=600)
    assert text.returncode == 0 and ", cached" in text.stdout.splitlines()[0], text.stdout + text.stderr
    assert "The reference (model.py's Model) on the CPU" in text.stdout
    broken = tmp_path / "broken.py"
    broken.write_text(open(small_task).read().replace("def forward(self, x):", "def forward(self, x):\n        raise "
                                                                              "KeyError('no such column')"))
    r = subprocess.run([scripted_agent.ANVIL, "task", "profile", str(broken), "--device", "cpu"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 1 and "task_error" in r.stderr and "KeyError" in r.stderr, r.stderr
    r = subprocess.run([scripted_agent.ANVIL, "task", "profile", small_task, "--device", "tpu"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode != 0 and "tpu" in r.stderr, r.stderr


def test_the_reference_profile_keeps_one_input_set_for_a_large_task(small_task, monkeypatch):
    """As the judge's lean rule: a task whose input set is LEAN_BYTES or more is profiled on one set
    (four sets of a 20 GiB task would not fit where the judge evaluates it fine)."""
    import types

    from anvil import harness, reference_profile
    import torch

    args = types.SimpleNamespace(task=small_task, input_sets=4)
    _model, sets = reference_profile._prepare(args, torch)
    assert len(sets) == 4
    monkeypatch.setattr(harness, "LEAN_BYTES", 128 * 256 * 4)  # the small task's one input, exactly
    _model, sets = reference_profile._prepare(args, torch)
    assert len(sets) == 1


def test_the_reference_profile_says_out_of_memory_is_not_the_tasks_fault():
    import torch

    from anvil import reference_profile

    oom = reference_profile._failed(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"), torch)
    assert oom["outcome"] == "gpu_memory" and "ran out of memory" in oom["message"], oom
    broken = reference_profile._failed(KeyError("no such column"), torch)
    assert broken["outcome"] == "task_error" and broken["message"] == "KeyError: 'no such column'", broken
