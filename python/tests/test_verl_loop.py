"""anvil's veRL agent loop (python/anvil/rl/verl_loop.py) run by the real `verl` package's own
AgentLoopWorker, configured by veRL's own ppo_trainer config, against a real `anvil serve` (CPU
variants) and the local Gemma 3 270M's tokenizer and chat template:

- a scripted policy (its turns tokenized by Gemma's tokenizer, with made-up log-probabilities)
  writes the CPU candidate through the tools, makes a malformed call, compiles, verifies and
  finishes: the batch veRL makes of it has the session's reward at the response's last token
  (rm_scores), the mask 1 exactly on the sampled ids, the sampler's log-probabilities beside them
  (rollout_log_probs), and prompt + response decode to exactly what Gemma's template renders for
  the conversation the model saw;
- the real model (anvil.local_model, llama.cpp) through anvil.rl.completions: the ids veRL's
  tokenizer made are the server's own tokenization, each turn continues the last token for token,
  and the reward is anvil's;
- bad rows and an unreachable server are said by name.
"""
import asyncio
import json
import os
import urllib.request

import numpy as np
import pytest

import verl  # noqa: E402 - python/requirements.txt installs it

from anvil.rl import local_checkpoint, verl_loop  # noqa: E402
from conftest import free_port, local_gguf, start_local_model, stop_local_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
LOOPS = os.path.join(ROOT, "python", "anvil", "rl", "configs", "agent_loops.yaml")
CPU_CANDIDATE = os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")

pytestmark = pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL)


@pytest.fixture(scope="module")
def gguf():
    return local_gguf()


@pytest.fixture(scope="module")
def checkpoint(gguf):
    return local_checkpoint.make_checkpoint(gguf, weights=False)


@pytest.fixture(scope="module")
def serve(cpu_serve):
    return cpu_serve


def loops_file(tmp_path, **settings):
    """anvil's agent_loops.yaml with some of the loop's settings changed."""
    import yaml
    entries = yaml.safe_load(open(LOOPS))
    entries[0].update(settings)
    path = tmp_path / "agent_loops.yaml"
    path.write_text(yaml.safe_dump(entries))
    return str(path)


def verl_config(checkpoint, serve_url, **over):
    """veRL's own ppo_trainer config, as `python -m verl.trainer.main_ppo` composes it, with anvil's
    agent loop file and the local model's checkpoint."""
    from hydra import compose, initialize_config_dir
    os.environ["ANVIL_SERVE_URL"] = serve_url
    overrides = {"actor_rollout_ref.model.path": checkpoint, "actor_rollout_ref.rollout.name": "vllm",
                 "actor_rollout_ref.rollout.prompt_length": 8192,
                 "actor_rollout_ref.rollout.response_length": 8192,
                 "actor_rollout_ref.rollout.multi_turn.format": "hermes",
                 "actor_rollout_ref.rollout.agent.agent_loop_config_path": LOOPS,
                 "actor_rollout_ref.rollout.calculate_log_probs": True,
                 "data.train_files": "unused.parquet", "data.val_files": "unused.parquet"}
    overrides.update(over)
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        return compose(config_name="ppo_trainer", overrides=["%s=%s" % kv for kv in overrides.items()])


def rows(tasks, **anvil):
    """A batch of data set rows as veRL's RLHFDataset hands them to the rollout."""
    from verl.protocol import DataProto
    n = len(tasks)
    extra = [{"index": i, "anvil": dict(anvil, task=t)} for i, t in enumerate(tasks)]
    return DataProto.from_dict(non_tensors={
        "raw_prompt": np.array([[{"role": "user", "content": "anvil task"}]] * n + [None], dtype=object)[:n],
        "agent_name": np.array(["anvil_agent"] * n, dtype=object),
        "extra_info": np.array(extra, dtype=object),
        "index": np.arange(n)})


def worker(config, server):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    return AgentLoopWorker(config, llm_client=server)


def unpadded(batch, i):
    """(prompt ids, response ids, response mask, rollout log-probs, rm_scores) of row i, padding off."""
    prompt, response = batch.batch["prompts"][i], batch.batch["responses"][i]
    width = prompt.shape[0]
    attn = batch.batch["attention_mask"][i]
    p = prompt[attn[:width].bool()].tolist()
    n = int(attn[width:].sum())
    return (p, response[:n].tolist(), batch.batch["response_mask"][i][:n].tolist(),
            batch.batch["rollout_log_probs"][i][:n].tolist(), batch.batch["rm_scores"][i][:n].tolist())


class ScriptedPolicy:
    """veRL's server-manager interface with scripted turns: each turn's text, tokenized by the
    model's tokenizer, then the end of turn; log-probabilities -0.001 * (position + 1)."""

    def __init__(self, tokenizer, turns, end_id, logprobs=True, abort_at=None):
        self.tokenizer, self.turns, self.end_id = tokenizer, list(turns), end_id
        self.logprobs, self.abort_at = logprobs, abort_at
        self.prompts, self.sampled = [], []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        from verl.workers.rollout.replica import TokenOutput
        self.prompts.append(list(prompt_ids))
        if self.abort_at == len(self.prompts) - 1:
            return TokenOutput(token_ids=[], stop_reason="aborted")
        text = self.turns.pop(0) if self.turns else "I am done."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.end_id]
        ids = ids[:sampling_params["max_tokens"]]
        self.sampled.append(ids)
        lps = [-0.001 * (k + 1) for k in range(len(ids))] if self.logprobs else None
        return TokenOutput(token_ids=ids, log_probs=lps, stop_reason="completed")


def call(name, **arguments):
    return "<tool_call>%s</tool_call>" % json.dumps({"name": name, "arguments": arguments})


def candidate_files():
    return {os.path.relpath(os.path.join(d, f), CPU_CANDIDATE): open(os.path.join(d, f)).read()
            for d, _, fs in os.walk(CPU_CANDIDATE) for f in fs}


def test_a_scripted_episode_is_one_sequence_masked_and_rewarded_as_verl_expects(checkpoint, serve, small_task):
    config = verl_config(checkpoint, serve)
    w = worker(config, None)
    tok = w.tokenizer
    end = tok.convert_tokens_to_ids("<end_of_turn>")
    writes = "I will write the candidate.\n" + "".join(call("write_file", path=p, content=t)
                                                        for p, t in sorted(candidate_files().items()))
    script = [writes,
              '<tool_call>{"name": "compile", "arguments": {</tool_call>',  # malformed: answered, counted
              call("launch_missiles") + call("compile") + call("verify"),  # a tool there is not: answered
              call("finish", summary="done")]
    policy = ScriptedPolicy(tok, script, end)
    w.llm_client = policy
    out = asyncio.run(w.generate_sequences(rows([{"path": small_task}])))

    prompt, response, mask, logprobs, scores = unpadded(out, 0)
    record = out.non_tensor_batch["anvil"][0]
    assert record["end_reason"] == "finish" and len(record["turns"]) == 4, record
    assert record["malformed"] == [{"turn": 1, "kind": "raw_markup", "blocks": 1, "parsed": 0},
                                   {"turn": 2, "kind": "unknown_tool", "name": "launch_missiles"}]
    assert [c["error_kind"] for c in record["turns"][2]["calls"]] == ["unknown_tool", None, None]
    answer = [m for m in record["messages"] if m["role"] == "tool" and m["name"] == "launch_missiles"]
    assert answer[0]["content"].startswith("error: no tool named 'launch_missiles' (the tools: bash,")
    assert record["status"] == "ok" and record["outcome"] == "ok" and record["reward"] >= 1, record
    assert out.non_tensor_batch["anvil_reward"][0] == record["reward"]

    # veRL's conventions: the reward on the response's last token, nowhere else
    assert scores[-1] == record["reward"] and not any(scores[:-1])
    # every turn was prompted with the whole sequence before it, and sampled exactly the script
    sequence = prompt + response
    for k, (p, s) in enumerate(zip(policy.prompts, policy.sampled)):
        assert sequence[:len(p)] == p and sequence[len(p):len(p) + len(s)] == s, "turn %d" % k
    assert sequence[-len(policy.sampled[-1]):] == policy.sampled[-1]  # it ends on the model's last token
    # mask 1 exactly on the sampled ids, with the sampler's log-probabilities beside them
    sampled_at = set()
    for p, s in zip(policy.prompts, policy.sampled):
        sampled_at.update(range(len(p) - len(prompt), len(p) - len(prompt) + len(s)))
    assert [i for i, m in enumerate(mask) if m] == sorted(sampled_at)
    expected_lp = [0.0] * len(mask)
    for p, s in zip(policy.prompts, policy.sampled):
        for k in range(len(s)):
            expected_lp[len(p) - len(prompt) + k] = -0.001 * (k + 1)
    assert logprobs == pytest.approx(expected_lp)
    # the whole sequence is what Gemma's template renders for the conversation the model saw, but
    # the newline the template writes after the last <end_of_turn>, which nobody sampled
    assert [m["content"] for m in record["messages"] if m["role"] == "assistant"] == script
    assert tok.decode(sequence) + "\n" == rendered(tok, record)


def rendered(tok, record):
    """Gemma's template over the recorded conversation: its tools, each model turn as written (its
    tool-call blocks in its text), each answer as the session gave it."""
    msgs = [{k: v for k, v in m.items() if k != "tool_calls"} for m in record["messages"]]
    return tok.apply_chat_template(msgs, tools=record["tools"], tokenize=False, add_generation_prompt=False)


@pytest.fixture(scope="module")
def local_model(gguf):
    proc, url = start_local_model(gguf, 8192)
    yield url
    stop_local_model(proc)


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_the_checkpoint_tokenizes_as_llama_cpp_does(checkpoint, local_model):
    """veRL tokenizes with the checkpoint's tokenizer, the server samples with llama.cpp's: the ids
    must be the same tokens (transformers' own GGUF conversion of Gemma splits "user" in two)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(checkpoint)
    texts = [open(os.path.join(ROOT, "share", "agent", "SKILL.md"), encoding="utf-8").read(),
             open(os.path.join(CPU_CANDIDATE, "kernels", "elementwise_chain_binding.cpp"), encoding="utf-8").read(),
             '<start_of_turn>user\nhello { "path": 1}<end_of_turn>\n', "\u00fcn\u00efc\u00f6d\u00e9 \u6f22\u5b57 \U0001F642\t\ttab  x   y\n\n\n z"]
    for text in texts:
        want = post(local_model, "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]
        assert tok.encode(text, add_special_tokens=False) == want, text[:60]


@pytest.fixture(scope="module")
def real_batch(checkpoint, serve, small_task, local_model, tmp_path_factory):
    """One trajectory of the real model (llama.cpp) as veRL's worker batches it."""
    from anvil.rl.completions import CompletionsServer
    config = verl_config(checkpoint, serve, **{"actor_rollout_ref.rollout.temperature": 1.0,
                                               "actor_rollout_ref.rollout.agent.agent_loop_config_path":
                                               loops_file(tmp_path_factory.mktemp("loops"), max_tokens_per_turn=192)})
    w = worker(config, CompletionsServer(local_model, model="gemma-3-270m"))
    return asyncio.run(w.generate_sequences(rows([{"path": small_task}], max_turns=2)))


def test_the_real_model_continues_its_sequence_and_gets_anvils_reward(real_batch, local_model):
    out = real_batch
    prompt, response, mask, logprobs, scores = unpadded(out, 0)
    record = out.non_tensor_batch["anvil"][0]
    # veRL's tokenizer and Gemma's template made the prompt the server itself would make
    opening = [m for m in record["messages"][:2]]
    assert prompt == post(local_model, "/tokenize", {"messages": opening, "tools": record["tools"]})["tokens"]
    assert record["end_reason"] in ("no_tool_calls", "turn_cut", "max_turns", "finish"), record["end_reason"]
    assert 1 <= len(record["turns"]) <= 2
    # the mask is 1 on what was sampled, with the server's log-probabilities; the rest are 0
    assert sum(mask) == record["model_tokens"] == sum(t["sampled"] for t in record["turns"])
    assert all(lp < 0 or lp == 0 for lp in logprobs)
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
    assert any(lp < 0 for lp, m in zip(logprobs, mask) if m)
    written = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append(response[start:i])
            start = None
    assert len(spans) == len(written) == len(record["turns"])
    for ids, text in zip(spans, written):
        shown = ids[:-1] if ids[-1] in (1, 106) else ids
        assert post(local_model, "/detokenize", {"tokens": shown})["prompt"] == text
    # the reward is the final evaluation's, at the last token
    assert record["reward"] in (-1.0, 1.0, 2.0, 3.0) and scores[-1] == record["reward"]
    assert record["evaluation"]["schema"] == "anvil.eval/1"


def test_a_row_without_an_anvil_task_is_refused_by_name(checkpoint, serve):
    config = verl_config(checkpoint, serve)
    w = worker(config, ScriptedPolicy(None, [], 0))
    batch = rows([{"path": "x.py"}])
    batch.non_tensor_batch["extra_info"][0] = {"index": 7}
    with pytest.raises(verl_loop.TaskRowError, match=r"row 7: extra_info.anvil is missing"):
        asyncio.run(w.generate_sequences(batch))
    batch.non_tensor_batch["extra_info"][0] = {"index": 3, "anvil": {"task": {"path": "x.py"}, "max_turns": 0}}
    with pytest.raises(verl_loop.TaskRowError, match=r"row 3: extra_info.anvil.max_turns must be a positive integer"):
        asyncio.run(w.generate_sequences(batch))


def test_what_the_session_would_refuse_is_answered_to_the_model_never_raised(checkpoint, serve, small_task):
    """A lone surrogate in a call's arguments (the server's JSON refuses the whole request), a call
    after finish in the same turn: answered as errors, counted; the reward is the evaluation's."""
    config = verl_config(checkpoint, serve)
    w = worker(config, None)
    end = w.tokenizer.convert_tokens_to_ids("<end_of_turn>")
    script = ['<tool_call>{"name": "bash", "arguments": {"command": "echo \\ud800"}}</tool_call>',
              call("finish", summary="x") + call("bash", command="touch late")]
    w.llm_client = ScriptedPolicy(w.tokenizer, script, end, logprobs=False)
    out = asyncio.run(w.generate_sequences(rows([{"path": small_task}])))
    record = out.non_tensor_batch["anvil"][0]
    assert record["end_reason"] == "finish" and record["reward"] == out.batch["rm_scores"][0].sum().item()
    assert [(m["kind"], m["name"]) for m in record["malformed"]] == [("bad_arguments", "bash")]
    assert [c["error_kind"] for c in record["turns"][1]["calls"]] == [None, "not_run"]
    answers = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert answers[0].startswith("error: bash: the arguments are not UTF-8 text")
    assert not any("not run" in a for a in answers)  # the finish turn's answers: the episode ended there
    # a sampler without log-probabilities: veRL gets none, not zeros
    assert "rollout_log_probs" not in out.batch.keys()


def test_an_aborted_generation_is_the_engines_and_raises(checkpoint, serve, small_task):
    w = worker(verl_config(checkpoint, serve), None)
    w.llm_client = ScriptedPolicy(w.tokenizer, [call("bash", command="ls")], 106, abort_at=1)
    with pytest.raises(verl_loop.RolloutAborted, match=r"the rollout engine aborted a generation of session \w+ \(turn 1\)"):
        asyncio.run(w.generate_sequences(rows([{"path": small_task}])))


def test_the_configs_turn_limit_wins_over_the_rows(checkpoint, serve, small_task):
    w = worker(verl_config(checkpoint, serve, **{"+anvil.max_turns": 1}), None)
    w.llm_client = ScriptedPolicy(w.tokenizer, [call("bash", command="ls")] * 3, 106)
    out = asyncio.run(w.generate_sequences(rows([{"path": small_task}], max_turns=200)))
    record = out.non_tensor_batch["anvil"][0]
    assert record["end_reason"] == "max_turns" and len(record["turns"]) == 1
    # the response ends on the model's last token: the bash answer appended after it is left out
    prompt, response, mask, _, scores = unpadded(out, 0)
    assert mask[-1] == 1 and scores[-1] == record["reward"]


def test_an_opening_over_the_prompt_length_is_refused_not_cut(checkpoint, serve, small_task):
    w = worker(verl_config(checkpoint, serve, **{"actor_rollout_ref.rollout.prompt_length": 1024}),
               ScriptedPolicy(None, [], 0))
    with pytest.raises(verl_loop.TaskRowError, match=r"task 01_small: the session's opening \(SKILL.md, the task, "
                                                     r"the tools\) is \d+ tokens, over rollout.prompt_length 1024"):
        asyncio.run(w.generate_sequences(rows([{"path": small_task}])))


def test_a_task_the_server_cannot_open_and_an_unreachable_server_are_said(checkpoint, serve, tmp_path):
    from anvil.client import ServeError
    w = worker(verl_config(checkpoint, serve), ScriptedPolicy(None, [], 0))
    with pytest.raises(ServeError, match="task"):
        asyncio.run(w.generate_sequences(rows([{"path": str(tmp_path / "missing.py")}])))
    nobody = "http://127.0.0.1:%d" % free_port()
    w = worker(verl_config(checkpoint, nobody, **{"actor_rollout_ref.rollout.agent.agent_loop_config_path":
                                                   loops_file(tmp_path, connect_wait=1)}), ScriptedPolicy(None, [], 0))
    with pytest.raises(verl_loop.AnvilUnavailable, match="anvil serve at http://127.0.0.1:"):
        asyncio.run(w.generate_sequences(rows([{"path": "x.py"}])))


def test_the_samplers_log_probabilities_feed_veRLs_rollout_correction(real_batch, gguf):
    """The trainer's log-probabilities of the sampled tokens (transformers, float32, the GGUF's
    weights dequantized) against the sampler's (llama.cpp, Q4_K_M) that the loop returned: close
    token by token (a mask or log-probability one token off would not be), and veRL's rollout
    correction, as the recipe configures it, weighs them."""
    import torch
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils.config import omega_conf_to_dataclass
    from anvil.rl import train
    out = real_batch
    prompt, response, mask, logprobs, _ = unpadded(out, 0)
    model = AutoModelForCausalLM.from_pretrained(local_checkpoint.make_checkpoint(gguf, weights=True),
                                                 dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    mine = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(1, torch.tensor(response)[:, None])[:, 0]
    sampled = torch.tensor(mask, dtype=torch.bool)
    gap = (mine[sampled] - torch.tensor(logprobs)[sampled]).abs()
    assert gap.median() < 0.1 and gap.mean() < 0.5, (gap.median(), gap.mean())
    old = torch.zeros_like(out.batch["rollout_log_probs"])
    old[0, :len(response)] = mine
    out.batch["old_log_probs"] = old
    cfg = train.compose("stage4_agentic")
    corrected, metrics = compute_rollout_correction_and_add_to_batch(
        out, omega_conf_to_dataclass(cfg.algorithm.rollout_correction, RolloutCorrectionConfig))
    weights = corrected.batch["rollout_is_weights"][0, :len(response)]
    assert weights[sampled].max() <= 2.0 and weights[sampled].min() > 0
    assert "rollout_corr/rollout_is_mean" in metrics, sorted(metrics)
    print("sampler vs trainer |log p| gap on %d sampled tokens: median %.4f, mean %.4f; IS weight mean %.4f"
          % (int(sampled.sum()), gap.median(), gap.mean(), metrics["rollout_corr/rollout_is_mean"]))
