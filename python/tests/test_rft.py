"""`anvil rft` over real episodes: the built `anvil agent` runs scripted token-level episodes against
tests/replay_server.py (judged on the CPU), and `anvil rft` turns the run directories into an SFT set.
Each kept example's input_ids, decoded with the replay server's toy tokenizer span by span, give back
the conversation as the model saw it; its loss_mask covers exactly the turns' sampled ids."""
import json
import os
import re
import subprocess

import pytest

import scripted_agent
from scripted_agent import replay_server

ANVIL = scripted_agent.ANVIL

pytestmark = pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="build/anvil is not built")


def rft(*args):
    return subprocess.run([ANVIL, "rft", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, small_task):
    """Run directories: two token-level samples of one solving script (the second a duplicate), a
    token-level episode with a malformed call before the same solution, one that gives up at once
    (reward -1), and a chat-mode solving episode."""
    out = tmp_path_factory.mktemp("runs")
    solve = scripted_agent.solving_turns()
    bad_call = {"content": "Let me look.", "tool_calls": [scripted_agent.call("read_file", "{\"path\": ")]}
    give_up = [{"content": "Done.", "tool_calls": [scripted_agent.call("finish", {"summary": "nothing"})]}]
    dirs = {}
    for name, turns, tokens, samples in (("tokens", solve, True, 2), ("malformed", [bad_call] + solve, True, 1),
                                         ("quit", give_up, True, 1), ("chat", solve, False, 1)):
        proc, files = scripted_agent.run_agent(str(out / name), small_task, turns, tokens=tokens, samples=samples)
        assert proc.returncode == 0 and len(files) == samples, proc.stderr[-3000:]
        dirs[name] = out / name / "run"
    return dirs


@pytest.fixture(scope="module")
def rft_set(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "sft.jsonl"
    r = rft(*runs.values(), "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), [json.loads(line) for line in open(out)], out


def test_each_episode_is_counted_once(rft_set):
    summary, lines, out = rft_set
    assert summary["read"] == 5
    assert summary["kept"] == 2 and summary["no_tokens"] == 1
    assert {k: v for k, v in summary["dropped"].items() if v} == {"duplicate": 1, "malformed": 1, "low_reward": 1}
    dup = summary["dropped_episodes"]["duplicate"][0]
    assert dup["source"].endswith("tokens/run/01_small/sample-1/trajectory.json"), dup
    assert json.load(open(str(out) + ".summary.json")) == summary
    kinds = [line["input_ids"] is None for line in lines]
    assert sorted(kinds) == [False, True]
    assert all(line["reward"] >= 1 and line["task"]["name"] == "01_small" for line in lines)


def test_the_token_sequence_decodes_to_the_conversation(rft_set):
    _, lines, _ = rft_set
    ex = next(line for line in lines if line["input_ids"] is not None)
    rec = json.load(open(ex["source"]))
    ids, mask, spans, msgs = ex["input_ids"], ex["loss_mask"], ex["spans"], ex["messages"]
    text = lambda s: replay_server.toy_text(ids[s[0]:s[1]])  # noqa: E731
    assert [s[2] for s in spans] == ["opening"] + ["model", "tool"] * (len(rec["turns"]) - 1) + ["model"]
    assert spans[0][0] == 0 and spans[-1][1] == len(ids)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # they tile the sequence
    assert text(spans[0]) == replay_server.toy_render(msgs[:2], True)
    assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    for k, turn in enumerate(rec["turns"]):
        model = spans[1 + 2 * k]
        # The model's span: its message's text, then its calls as <tool_call> blocks, then <|end|>.
        said = text(model)
        assert said.endswith("<|end|>")
        blocks = [json.loads(b) for b in re.findall(r"<tool_call>(.*?)</tool_call>", said)]
        msg = msgs[assistants[k]]
        assert re.sub(r"<tool_call>.*?</tool_call>", "", said[:-len("<|end|>")]).strip() == msg["content"]
        assert [(b["name"], b["arguments"]) for b in blocks] == \
            [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]]
        assert ids[model[0]:model[1]] == turn["token_ids"]
        if k + 1 < len(rec["turns"]):
            # The tool span: the template's newline after <|end|>, the tool messages, the generation prompt.
            answers = msgs[assistants[k] + 1:assistants[k + 1]]
            assert text(spans[2 + 2 * k]) == "\n" + replay_server.toy_render(answers, True)[len("<bos>"):]
    # The loss is on the sampled ids, exactly: every turn's, nothing else.
    assert [i for i, m in zip(ids, mask) if m] == [i for t in rec["turns"] for i in t["token_ids"]]
    assert sum(mask) == sum(s[1] - s[0] for s in spans if s[2] == "model")
    assert all((lp == -0.1) if m else (lp == 0) for lp, m in zip(ex["logprobs"], mask))
    assert ex["tokenizer"] == rec["tokenizer"]["sha256"]


def test_a_bad_record_stops_the_run_and_writes_nothing(runs, tmp_path):
    bad = tmp_path / "run" / "x" / "sample-0" / "trajectory.json"
    bad.parent.mkdir(parents=True)
    rec = json.load(open(next((runs["quit"]).rglob("trajectory.json"))))
    rec["schema"] = "anvil.trajectory/0"
    bad.write_text(json.dumps(rec))
    out = tmp_path / "sft.jsonl"
    r = rft(runs["tokens"], tmp_path / "run", "--out", out)
    assert r.returncode == 1
    assert r.stderr == "anvil rft: %s: schema \"anvil.trajectory/0\" is not anvil.trajectory/1\n" % bad
    assert not out.exists() and os.listdir(tmp_path) == ["run"]
    r = rft(runs["tokens"], tmp_path / "run", "--out", out, "--skip-bad")
    assert r.returncode == 0, r.stderr
    assert "unreadable                  1  (skipped)" in r.stdout, r.stdout
    assert "skipped %s: schema" % bad in r.stderr


def test_usage_errors_exit_2(tmp_path):
    assert rft(tmp_path).returncode == 2  # no --out
    r = rft(tmp_path / "missing", "--out", tmp_path / "o.jsonl")
    assert r.returncode == 2 and "missing does not exist" in r.stderr
    assert rft(tmp_path, "--out", tmp_path / "o.jsonl", "--max-repeats", "0").returncode == 2
    assert "--max-stalled-compiles" in rft("--help").stdout
