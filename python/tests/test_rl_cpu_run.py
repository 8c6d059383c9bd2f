"""A real RL run on the CPU (issue 19): TRL's GRPOTrainer trains the local Gemma 3 270M (full
fine-tuning, float32) for 3 optimizer steps on anvil's CPU tasks, every sample's reward from a real
`anvil serve` (python/anvil/rl/grpo_cpu.py). Checked: 3 steps logged; each sample's reward is one
of anvil's and is what the server answered for that sample's evaluation (read back by id, and the
server's count of evaluations grew by exactly the samples that had code); the loss and grad norm are
finite each step; the weights moved (a tensor of the trained model against the checkpoint's file);
the summary says what ran where. The checks are tested too: a log whose rewards the server did not
give is refused.
"""
import asyncio
import json
import math
import os
import re

import pytest

from anvil.client import Client
from anvil.rl import grpo_cpu, local_checkpoint
from conftest import local_gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
KB = os.path.join(ROOT, "examples", "kernelbench", "cpu")
# CPU-sized KernelBench problems whose ModelNew body is a few lines: it fits 64 sampled tokens.
TASKS = [os.path.join(KB, n) for n in ("add_model.py", "fuse_gelu_model.py", "tiled_matmul_model.py")]
REWARDS = (-1, 1, 2, 3)

pytestmark = pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL)


@pytest.fixture(scope="module")
def server(cpu_serve):
    return cpu_serve


def evaluations_done(url):
    """The server's count of finished evaluations, over every outcome (its /metrics)."""
    text = asyncio.run(Client(url).metrics())
    return sum(int(float(v)) for v in re.findall(r"^anvil_evaluations_total\{[^}]*\} (\S+)$", text, re.M))


def problems(records, url, done_before, done_after):
    """What in a run's log the server does not back: each sample's reward must be anvil's, taken
    from the evaluation the server answered for it (or -1 for a completion without code, which
    has none), and the server must have finished exactly the evaluations the log names."""
    found, ids = [], []

    async def read(ids_):
        async with Client(url) as c:
            return await asyncio.gather(*(c.result(i, wait=0) for i in ids_))

    samples = [(r["step"], s) for r in records for s in r["samples"]]
    answers = dict(zip([s["evaluation"] for _, s in samples if s["evaluation"]],
                       asyncio.run(read([s["evaluation"] for _, s in samples if s["evaluation"]]))))
    for step, s in samples:
        where = "step %d evaluation %s" % (step, s["evaluation"])
        if s["reward"] not in REWARDS:
            found.append("%s: reward %r is not one of anvil's" % (where, s["reward"]))
        if s["evaluation"] is None:
            if s["outcome"] != "no_code" or s["reward"] != -1 or s["candidate"] is not None:
                found.append("%s: a %s sample with reward %r and no evaluation" % (where, s["outcome"], s["reward"]))
            continue
        ids.append(s["evaluation"])
        a = answers[s["evaluation"]]
        if a["status"] != "done" or (a["outcome"], a["reward"]) != (s["outcome"], s["reward"]):
            found.append("%s: logged %s/%r, the server says %s %s/%r" % (where, s["outcome"], s["reward"],
                                                                          a["status"], a["outcome"], a["reward"]))
    if len(set(ids)) != len(ids):
        found.append("an evaluation is named twice: %s" % ids)
    if done_after - done_before != len(ids):
        found.append("the server finished %d evaluations, the log names %d" % (done_after - done_before, len(ids)))
    return found


def test_a_completion_is_judged_as_the_body_of_the_class_the_prefill_opens():
    prefill = "```python\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    body = "    def forward(self, a, b):\n        return a + b\n"
    head = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    assert grpo_cpu.candidate_of(prefill, body + "\n\nmodel = ModelNew()\n```") == head + body
    assert grpo_cpu.candidate_of(prefill, body + "```\n") == head + body
    assert grpo_cpu.candidate_of(prefill, body + "    ```\nmore") == head + body
    assert grpo_cpu.candidate_of(prefill, "\n  \n```") is None
    assert grpo_cpu.candidate_of(prefill, "class Other:\n    pass") is None
    assert grpo_cpu.candidate_of(prefill, "") is None


def test_a_directory_of_tasks_leaves_the_candidates_beside_them_out():
    names = [os.path.basename(p) for p in grpo_cpu.task_files([KB])]
    assert "add_model.py" in names and "tiled_matmul_model.py" in names
    assert not [n for n in names if n.endswith("_new.py")]


def test_the_checks_refuse_rewards_the_server_did_not_give(server):
    """A log the reward function could have made up fails the checks the run must pass."""
    task = {"source": open(TASKS[0]).read(), "name": "add_model.py"}
    wrong = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
             "    def __init__(self):\n        super().__init__()\n\n"
             "    def forward(self, a, b):\n        return a - b\n")
    before = evaluations_done(server)
    r = asyncio.run(Client(server).evaluate(task, {"source": wrong}, grpo_cpu.PROTOCOL, limit=600))
    after = evaluations_done(server)
    assert (r["outcome"], r["reward"]) == ("wrong_answer", -1), r

    def log(**sample):
        s = dict({"reward": -1, "outcome": "wrong_answer", "evaluation": r["id"], "candidate": wrong}, **sample)
        return [{"step": 1, "samples": [s]}]

    assert problems(log(), server, before, after) == []
    assert problems(log(reward=1, outcome="ok"), server, before, after)  # the reward it did not give
    assert problems(log(reward=1, outcome="ok", evaluation=None), server, before, after)  # a constant, unjudged
    assert problems(log(reward=-1, outcome="no_code", evaluation=None, candidate=None), server, before, after)
    assert problems(log(), server, before, after + 1)  # an evaluation the log does not name


@pytest.mark.slow
def test_grpo_trains_the_local_model_on_anvil_rewards(server, tmp_path):
    import torch
    import trl
    from safetensors import safe_open
    checkpoint = local_checkpoint.make_checkpoint(local_gguf())  # with weights: about a minute the first time
    out = os.environ.get("ANVIL_RL_CPU_OUT") or str(tmp_path / "run")  # set it to keep the run's files
    before = evaluations_done(server)
    summary, trainer = grpo_cpu.run(grpo_cpu.parse(["--serve", server, "--tasks", *TASKS, "--steps", "3",
                                                    "--out", out, "--checkpoint", checkpoint]))
    after = evaluations_done(server)
    records = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]

    assert [r["step"] for r in records] == [1, 2, 3]
    assert problems(records, server, before, after) == []
    assert summary["evaluations"] == after - before and summary["errors"] == 0
    for r in records:
        assert len(r["rewards"]) == 4 and r["rewards"] == [s["reward"] for s in r["samples"]], r["rewards"]
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]), r
        assert r["reward_mean"] == pytest.approx(sum(r["rewards"]) / 4)
        assert all(v >= 0 for v in r["seconds"].values()) and r["seconds"]["generation"] > 0, r["seconds"]
    assert any(r["reward_std"] > 0 for r in records), "every group had equal rewards: GRPO had nothing to learn"

    # An optimizer step happened: the trained weights are not the checkpoint's.
    name = "model.layers.0.self_attn.q_proj.weight"
    with safe_open(os.path.join(checkpoint, "model.safetensors"), "pt") as f:
        assert not torch.equal(f.get_tensor(name), trainer.model.state_dict()[name].detach())
    assert summary["weights"]["changed"] > 0

    assert json.load(open(os.path.join(out, "summary.json"))) == summary
    assert summary["steps"] == 3 and summary["generations"] == 4 and summary["checkpoint"] == checkpoint
    assert summary["versions"]["trl"] == trl.__version__ and summary["versions"]["torch"] == torch.__version__
    assert [t["name"] for t in summary["tasks"]] == [os.path.basename(t) for t in TASKS]
    assert summary["machine"]["nproc"] == os.cpu_count() and summary["machine"]["cpu"]
    assert summary["date"] and 0 < summary["train_seconds"] <= summary["wall_seconds"]
    assert summary["gguf_sha256"] == local_checkpoint.sha256_of(local_gguf())
