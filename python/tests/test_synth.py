"""anvil synth's Python half: the catalogue and its generator, composition, the CPU stage's
filters, decontamination, the worker's protocol, the Parquet writer, and `anvil synth` end to end
with the real worker (the scheduler's own cases are src/anvil/synth/synth_test.cpp's)."""
import collections
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from anvil.synth import catalog, compose, decontam, filters
from conftest import ANVIL, ROOT


@pytest.fixture(scope="module")
def cat():
    return catalog.load()


@pytest.fixture(scope="module")
def index():
    return decontam.Index.load()


@pytest.fixture(scope="module")
def checker(cat, index, tmp_path_factory):
    return filters.Checker(cat, index, decontam.THRESHOLD, str(tmp_path_factory.mktemp("scratch")))


def test_the_committed_catalogue_is_what_its_generator_makes_now():
    """The catalogue is data with its generator: crawling the installed torch and transformers
    again gives the committed operators and the same reasons for those left out."""
    fresh = catalog.crawl()
    committed = catalog.load()
    assert [op["name"] for op in fresh["operators"]] == [op["name"] for op in committed["operators"]]
    assert fresh["operators"] == committed["operators"]
    assert fresh["excluded"] == committed["excluded"]
    assert fresh["versions"] == committed["versions"]


def test_catalogue_entries_are_deterministic_float_operators_with_reasons_for_the_rest(cat):
    names = {op["name"] for op in cat["operators"]}
    for expected in ("nn.Conv2d", "nn.Linear", "nn.LayerNorm", "nn.GELU", "torch.softmax", "operator.add",
                     "torch.matmul", "transformers.models.llama.modeling_llama.LlamaRMSNorm"):
        assert expected in names, expected
    families = collections.Counter(op["family"] for op in cat["operators"])
    assert set(families) >= {"convolution", "gemm", "normalization", "pooling", "reduction", "elementwise"}
    stochastic = {op["name"] for op in cat["operators"] if op["stochastic"]}
    assert {"F.dropout", "nn.RReLU"} <= stochastic
    reasons = {e["name"]: e["reason"] for e in cat["excluded"]}
    assert reasons["nn.Identity"] == "the identity"
    assert "deprecated" in reasons["torch.nuclear_norm"]
    # an SVD's GPU time is beyond the estimate (the GPU stage timed 1-31 s for 2-12 ms estimated)
    assert "iterative matrix decomposition" in reasons["torch.pinverse"]
    assert "torch.inverse" in names  # a direct solve (LU): its time follows its size, it stays
    assert "not finite" in reasons["torch.log"]  # NaN on a standard normal input
    assert "rank-2" in reasons.get("nn.InstanceNorm1d", "") or "2" not in next(
        op for op in cat["operators"] if op["name"] == "nn.InstanceNorm1d")["ranks"]


def test_a_catalogue_of_another_version_is_refused(tmp_path):
    p = tmp_path / "ops.json"
    p.write_text(json.dumps({"version": 99, "operators": []}))
    with pytest.raises(ValueError, match="version 99"):
        catalog.load(str(p))


def test_composition_is_reproducible_and_follows_the_papers_shares(cat):
    a = compose.compose(cat, 3, 17, torch)
    b = compose.compose(cat, 3, 17, torch)
    assert a.code() == b.code()
    assert compose.compose(cat, 4, 17, torch).code() != a.code()
    lengths = collections.Counter()
    for i in range(300):
        try:
            lengths[compose.compose(cat, 0, i, torch).data_source()] += 1
        except compose.ComposeError:
            lengths["error"] += 1
    assert lengths["torch#2"] / 300 > 0.7  # 83.77% in Ops-6K
    assert lengths["torch#1"] + lengths["transformers"] > 0
    assert lengths["error"] < 15


def test_a_composed_tasks_code_computes_its_recorded_operators(cat):
    """What decontamination reads from the code is what the composer recorded: the two agree on
    every operation of 60 tasks."""
    for i in range(60):
        try:
            task = compose.compose(cat, 1, i, torch)
        except compose.ComposeError:
            continue
        assert decontam.op_sequence(task.code()) == task.canonical_ops, task.code()


def test_the_probe_instance_is_the_task_with_a_smaller_batch(cat):
    task = compose.make(cat, ["nn.Conv2d", "nn.GELU"], 4, torch)
    full, probe = task.code(), task.code(compose.PROBE_BATCH)
    assert "batch_size = %d" % task.batch in full and "batch_size = %d" % compose.PROBE_BATCH in probe
    assert full.replace("batch_size = %d" % task.batch, "") == probe.replace("batch_size = %d" % compose.PROBE_BATCH, "")
    assert compose.WINDOW_MS[0] <= task.estimate["ms"] <= compose.WINDOW_MS[1]
    assert task.batch >= compose.MIN_BATCH


@pytest.mark.parametrize("names,rank,reason", [
    (["nn.Conv2d", "nn.ReLU"], 4, None),
    (["nn.Softmax", "torch.sum"], 2, "vet"),         # softmax's rows sum to 1: a constant
    (["F.dropout", "nn.Linear"], 2, "deterministic"),  # F.dropout trains by default: random
    (["nn.Conv2d"], 4, "decontaminate"),              # KernelBench level 1's convolutions
])
def test_each_filter_rejects_what_it_is_for(cat, checker, names, rank, reason):
    record = checker.check(lambda: compose.make(cat, names, rank, torch), 0, 0)
    if reason is None:
        assert record["status"] == "accepted", record
        assert set(record["checks"]) >= {"eager", "deterministic", "compile", "vet", "decontaminate"}
    else:
        assert record["status"] == "rejected" and record["reason"] == reason, record


def test_a_task_whose_estimate_is_outside_the_window_is_rejected(cat, checker, monkeypatch):
    monkeypatch.setattr(compose, "WINDOW_MS", (1e6, 2e6))
    record = checker.check(lambda: compose.make(cat, ["nn.Conv2d", "nn.ReLU"], 4, torch), 0, 0)
    assert record["reason"] == "runtime_estimate" and "outside" in record["detail"]


def test_a_composer_that_raises_is_a_recorded_rejection_not_a_crash(checker):
    def broken():
        raise RuntimeError("the composer broke")

    record = checker.check(broken, 0, 5)
    assert record["status"] == "rejected" and record["reason"] == "compose"
    assert "the composer broke" in record["detail"]


KB_STYLE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """A convolution, a ReLU and a bias."""
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x

batch_size = 128
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''


def test_op_sequences_read_every_spelling_the_same_way():
    assert decontam.op_sequence(KB_STYLE) == ["conv2d", "relu", "add"]
    other = KB_STYLE.replace("torch.relu(x)", "F.relu(x)").replace("x = x + self.bias", "x += self.bias")
    assert decontam.op_sequence(other) == ["conv2d", "relu", "add"]
    method = KB_STYLE.replace("torch.relu(x)", "x.relu().contiguous().view(x.shape)")
    assert decontam.op_sequence(method) == ["conv2d", "relu", "add"]
    with pytest.raises(decontam.CodeError, match="not valid Python"):
        decontam.op_sequence("class Model(:\n")


def test_renamed_and_resized_code_is_still_recognised(index):
    renamed = (KB_STYLE.replace("self.conv", "self.c0").replace("bias_shape", "bshape").replace("= 128", "= 256")
               .replace('"""A convolution, a ReLU and a bias."""', "# nothing to see"))
    assert decontam.similarity(decontam.fingerprint(KB_STYLE), decontam.fingerprint(renamed)) == 1.0
    found = index.check(renamed)
    assert found["contaminated"] and found["reason"] == "kernelbench_ops"
    assert "level2/1_Conv2D_ReLU_BiasAdd.py" in found["same_ops"]
    # the same code computing something KernelBench has not: not by its ops; the similarity is reported
    changed = renamed.replace("torch.relu(x)", "torch.special.erfcx(torch.cos(x))")
    found = index.check(changed)
    assert not found["contaminated"] and found["nearest"][0]["similarity"] < decontam.THRESHOLD


def test_the_committed_kernelbench_index_covers_levels_1_to_3(index):
    levels = collections.Counter(p["level"] for p in index.problems)
    assert levels == {"level1": 100, "level2": 100, "level3": 50}
    assert index.source.get("commit")


def test_the_worker_answers_a_bad_request_and_goes_on(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    requests = "not json\n" + json.dumps({"seed": 0, "index": 1}) + "\n"
    r = subprocess.run([sys.executable, "-m", "anvil.synth.worker"], input=requests, capture_output=True, text=True,
                       env=env, timeout=300)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0, r.stderr
    assert lines[0]["ready"] is True
    assert "bad request" in lines[1]["error"]
    assert lines[2]["index"] == 1 and lines[2]["status"] in ("accepted", "rejected")


def test_the_worker_asks_before_filtering_and_a_duplicate_costs_no_filter(tmp_path):
    """The scheduler's answer decides: a key an accepted task has stops the task after compose (no
    filter runs); no such task, and the filters run as without the question."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.Popen([sys.executable, "-m", "anvil.synth.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert json.loads(p.stdout.readline())["ready"] is True
        for index in range(40):  # the first tasks of seed 0 that compose
            p.stdin.write(json.dumps({"seed": 0, "index": index, "ask": True}) + "\n")
            p.stdin.flush()
            first = json.loads(p.stdout.readline())
            if first.get("ask") == "duplicate":
                break
            assert first["reason"] == "compose"  # only a task that did not compose is answered unasked
        assert first["index"] == index and first["key"]
        p.stdin.write(json.dumps({"duplicate_of": 3}) + "\n")
        p.stdin.flush()
        skipped = json.loads(p.stdout.readline())
        assert skipped["reason"] == "duplicate" and "task 3" in skipped["detail"]
        assert set(skipped["checks"]) == {"compose", "duplicate"} and skipped["key"] == first["key"]
        p.stdin.write(json.dumps({"seed": 0, "index": index, "ask": True}) + "\n")
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["key"] == first["key"]
        p.stdin.write(json.dumps({"duplicate_of": None}) + "\n")
        p.stdin.flush()
        filtered = json.loads(p.stdout.readline())
        assert filtered["reason"] != "duplicate" and "runtime_estimate" in filtered["checks"]
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0


def test_the_parquet_writer_puts_a_file_in_place_whole_or_not_at_all(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"ops": ["nn.ReLU"], "data_source": "torch#1"}) + "\n")  # no code
    out = tmp_path / "t.parquet"
    r = subprocess.run([sys.executable, "-m", "anvil.synth.parquet", str(rows), str(out)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 1 and "no field" in r.stderr
    assert not out.exists() and not (tmp_path / "t.parquet.tmp").exists()


def test_anvil_synth_end_to_end_with_the_real_worker(tmp_path):
    """`anvil synth` as a user runs it: Ops-6K's columns and anvil's, the summary and the page; a
    second run of the same command reads its journal and composes nothing again."""
    import pyarrow.parquet as pq

    out = tmp_path / "tasks.parquet"
    cmd = [ANVIL, "synth", "--count", "6", "--out", str(out), "--jobs", "2", "--seed", "11", "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 tasks accepted" in r.stdout
    table = pq.read_table(str(out))
    assert table.num_rows == 6
    assert table.column_names[:3] == ["ops", "data_source", "code"]
    for code, ops in zip(table.column("code").to_pylist(), table.column("canonical_ops").to_pylist()):
        assert decontam.op_sequence(code) == ops
    summary = json.loads((tmp_path / "tasks.summary.json").read_text())
    assert summary["schema"] == "anvil.synth-summary/1" and summary["tasks"] == 6
    assert "<h2>Filter funnel</h2>" in (tmp_path / "tasks.html").read_text()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    summary2 = json.loads((tmp_path / "tasks.summary.json").read_text())
    assert summary2["run"]["tried_this_run"] == 0 and summary2["run"]["resumed_from"] == summary["run"]["tried_this_run"]
    assert pq.read_table(str(out)).column("code").to_pylist() == table.column("code").to_pylist()


GPU_STAGE_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(512, 512) / 23)

    def forward(self, x):
        return torch.tanh(x @ self.w){extra}


def get_inputs():  # about 3 ms on a 2-core CI machine: well inside the stage's 1-100 ms band
    return [torch.randn(1024, 512)]


def get_init_inputs():
    return []
"""


def test_the_gpu_stage_gives_each_task_its_verdict_on_the_cpu(tmp_path):
    """gpu_stage on the CPU (--device cpu): a task of a few milliseconds accepted and timed, one that
    draws random numbers in forward rejected as non-deterministic, one whose output is NaN rejected
    by eager; the journal resumed (nothing checked twice); the audit of the accepted sample (the
    GPU's run: bench/gpu_synth_check.sh)."""
    extras = {0: "", 1: " + torch.rand(1)", 2: " * float('nan')"}
    rows = [{"index": i, "ops": ["torch.matmul", "torch.tanh"], "code": GPU_STAGE_TASK.replace("{extra}", e),
             "estimate_ms": 5.0} for i, e in extras.items()]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    cmd = [sys.executable, "-m", "anvil.synth.gpu_stage", str(tasks), "--out", str(tmp_path / "o"), "--device", "cpu",
           "--procs", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    records = {x["index"]: x for x in map(json.loads, (tmp_path / "o" / "gpu.jsonl").read_text().splitlines())}
    assert records[0]["status"] == "accepted", records[0]
    assert 1 <= records[0]["eager_ms"] <= 100 and records[0]["compile_ms"] > 0
    assert records[1]["reason"] == "gpu_deterministic" and "differs" in records[1]["detail"]
    assert records[2]["reason"] == "gpu_eager" and "NaN" in records[2]["detail"]
    summary = json.loads((tmp_path / "o" / "gpu-summary.json").read_text())
    assert summary["checked"] == 3 and summary["accepted"] == 1
    assert summary["rejected"] == {"gpu_deterministic": 1, "gpu_eager": 1}
    again = subprocess.run(cmd + ["--vet-sample", "5"], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len((tmp_path / "o" / "gpu.jsonl").read_text().splitlines()) == 3  # every verdict was there
    summary = json.loads((tmp_path / "o" / "gpu-summary.json").read_text())
    assert summary["vetted"] == 1 and not summary["vet_errors"] and not summary["sample_nondeterministic"]


def test_the_gpu_stage_drops_a_task_that_hangs_or_kills_its_process_and_goes_on(tmp_path):
    """A task that hangs is killed with its process at --task-timeout (gpu_timeout), one that ends its
    process is gpu_error; new processes take their places and every other task gets its verdict. Tasks
    end their processes at once, several in a row: the stage knows what each process holds because it
    handed it over (a process's own "I started" message, queued by a feeder thread, was lost with an
    os._exit, and the task then had no verdict at all: CI, 2026-12-02)."""
    init = {0: "        import time; time.sleep(600)\n", 1: "        import os; os._exit(7)\n", 2: "",
            3: "        import os; os._exit(8)\n", 4: "        import os; os._exit(9)\n", 5: ""}
    rows = []
    for i, line in init.items():
        code = GPU_STAGE_TASK.replace("{extra}", "").replace("        super().__init__()\n",
                                                              "        super().__init__()\n" + line)
        rows.append({"index": i, "ops": ["torch.matmul"], "code": code, "estimate_ms": 5.0})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "anvil.synth.gpu_stage", str(tasks), "--out", str(tmp_path / "o"),
                        "--device", "cpu", "--procs", "2", "--task-timeout", "60"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    records = {x["index"]: x for x in map(json.loads, (tmp_path / "o" / "gpu.jsonl").read_text().splitlines())}
    assert sorted(records) == list(range(6)), records
    assert records[0]["reason"] == "gpu_timeout" and "killed" in records[0]["detail"]
    for i, code in ((1, 7), (3, 8), (4, 9)):
        assert records[i]["reason"] == "gpu_error" and "exit code %d" % code in records[i]["detail"], records[i]
    assert records[2]["status"] == "accepted" and records[5]["status"] == "accepted", (records[2], records[5])
    assert time.monotonic() - t0 < 300

