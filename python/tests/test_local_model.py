"""anvil.local_model: the chat template, the tool-call parsing, and the real server (Gemma 3 270M on
llama.cpp, from .venv-llm) token-in/token-out: what /tokenize makes of messages is what a chat
completion was prompted with, sampled ids decode to the text, a seed repeats a sample, and a turn
continues a sequence token for token."""
import json
import os
import re
import urllib.error
import urllib.request

import pytest

from anvil import local_model as lm
from conftest import local_gguf, start_local_model, stop_local_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMMA = os.path.join(ROOT, "python", "anvil", "chat_templates", "gemma3.jinja")


def render(messages, add_generation_prompt=True, tools=None):
    t = lm.template_of(open(GEMMA).read())
    return t.render(messages=lm.with_tools(messages, tools, False), add_generation_prompt=add_generation_prompt,
                    bos_token="<bos>", eos_token="<eos>")


def test_gemma_turns_system_first_tool_results_in_one_user_turn_nothing_escaped():
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls <dir> & echo \'x\'"}'}}
    text = render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "go"},
                   {"role": "assistant", "content": "", "tool_calls": [call, dict(call, id="c2")]},
                   {"role": "tool", "tool_call_id": "c1", "content": "a<b>"},
                   {"role": "tool", "tool_call_id": "c2", "content": "\"q\""}])
    assert text == ('<bos><start_of_turn>user\nBe brief.\n\ngo<end_of_turn>\n'
                    '<start_of_turn>model\n<tool_call>{"name": "bash", "arguments": {"command": "ls <dir> & echo \'x\'"}}'
                    '</tool_call><tool_call>{"name": "bash", "arguments": {"command": "ls <dir> & echo \'x\'"}}'
                    '</tool_call><end_of_turn>\n'
                    '<start_of_turn>user\n<tool_response>\na<b>\n</tool_response>\n<tool_response>\n"q"\n'
                    '</tool_response><end_of_turn>\n<start_of_turn>model\n')


def test_tools_reach_a_template_without_them_through_the_system_turn():
    tools = [{"type": "function", "function": {"name": "finish", "description": "End <now>.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    text = render([{"role": "user", "content": "hi"}], tools=tools)
    assert text.startswith("<bos><start_of_turn>user\n# Tools")
    assert '{"name": "finish", "description": "End <now>.", "parameters": {"type": "object", "properties": {}}}' in text
    assert text.endswith("<tool_call>{\"name\": \"NAME\", \"arguments\": {\"ARGUMENT\": \"VALUE\"}}</tool_call>\n\n"
                         "hi<end_of_turn>\n<start_of_turn>model\n")


def test_a_role_gemma_has_not_is_refused_by_name():
    model = lm.Model.__new__(lm.Model)
    model.template, model.template_knows_tools, model.bos, model.eos = lm.template_of(open(GEMMA).read()), False, "", ""
    with pytest.raises(lm.BadRequest, match="a message of role developer"):
        model.render([{"role": "developer", "content": "x"}])
    with pytest.raises(lm.BadRequest, match="messages: a list of objects"):
        model.render("hello")


def test_tool_calls_are_parsed_and_a_block_that_does_not_parse_stays_in_the_text():
    content, calls = lm.parse_tool_calls('Let me look.\n<tool_call>{"name": "bash", "arguments": {"command": "ls"}}'
                                         '</tool_call>\n<tool_call>{"name": "finish"}</tool_call>')
    assert content == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("bash", {"command": "ls"}), ("finish", {})]
    content, calls = lm.parse_tool_calls('<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>')
    assert calls == [] and content.startswith("<tool_call>")


def test_sampling_options_are_checked_by_name():
    with pytest.raises(lm.BadRequest, match="max_tokens: at least 1"):
        lm.sampling_of({"max_tokens": 0})
    with pytest.raises(lm.BadRequest, match="top_k: a number \\(an integer\\)"):
        lm.sampling_of({"top_k": 2.5})
    with pytest.raises(lm.BadRequest, match="stop: a string or a list of strings"):
        lm.sampling_of({"stop": [1]})
    assert lm.sampling_of({"stop": "x", "seed": 3})["stop"] == ("x",)


# -- the real server ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    proc, url = start_local_model(local_gguf(), 2048)
    yield url
    stop_local_model(proc)


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime number."}]


def test_a_chat_turn_is_prompted_with_what_tokenize_makes_of_its_messages(server):
    status, tok = post(server + "/tokenize", {"messages": MESSAGES, "add_generation_prompt": True})
    assert status == 200 and tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 2048
    status, text = post(server + "/detokenize", {"tokens": tok["tokens"]})
    assert text["prompt"] == render(MESSAGES)
    status, chat = post(server + "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 12, "seed": 7,
                                                         "logprobs": True})
    assert status == 200, chat
    c = chat["choices"][0]
    assert chat["prompt_token_ids"] == tok["tokens"]
    assert len(c["token_ids"]) == chat["usage"]["completion_tokens"] <= 12
    assert [e["token_id"] for e in c["logprobs"]["content"]] == c["token_ids"]
    assert all(e["logprob"] <= 0 for e in c["logprobs"]["content"])
    shown = c["token_ids"][:-1] if c["finish_reason"] == "stop" else c["token_ids"]
    assert post(server + "/detokenize", {"tokens": shown})[1]["prompt"] == (c["message"]["content"] or "")


def test_completions_from_token_ids_repeat_with_a_seed_and_continue_a_sequence(server):
    prompt = post(server + "/tokenize", {"messages": MESSAGES})[1]["tokens"]
    body = {"prompt": prompt, "max_tokens": 8, "seed": 11, "logprobs": 0, "temperature": 1.0}
    _, a = post(server + "/v1/completions", body)
    _, b = post(server + "/v1/completions", body)
    _, other = post(server + "/v1/completions", dict(body, seed=12))
    assert a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]
    assert a["choices"][0]["logprobs"]["token_logprobs"] == b["choices"][0]["logprobs"]["token_logprobs"]
    assert a["prompt_token_ids"] == prompt
    assert other["choices"][0]["token_ids"] != a["choices"][0]["token_ids"]  # 8 draws from 262k tokens
    # Greedy: each sampled token is the most likely, so its log-probability is the largest, and a
    # sequence continued from prompt + sampled ids is the same model's continuation.
    _, g = post(server + "/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 0})
    ids = g["choices"][0]["token_ids"]
    _, g2 = post(server + "/v1/completions", {"prompt": prompt + ids[:3], "max_tokens": 3, "temperature": 0})
    assert g2["choices"][0]["token_ids"] == ids[3:6]


def test_bad_requests_are_answered_400_naming_what_is_wrong(server):
    assert post(server + "/v1/completions", {"prompt": []}) == \
        (400, {"error": {"message": "prompt: a string or a non-empty list of token ids", "type": "invalid_request_error"}})
    status, e = post(server + "/v1/completions", {"prompt": [2] * 3000})
    assert status == 400 and re.search("maximum context length is 2048 tokens", e["error"]["message"])
    status, e = post(server + "/v1/chat/completions", {"messages": [{"role": "critic", "content": "x"}]})
    assert status == 400 and "a message of role critic" in e["error"]["message"]
    status, e = post(server + "/tokenize", {"tokens": [1]})
    assert status == 400 and e["error"]["message"] == "a prompt (a string) or messages"
    for path, body in (("/detokenize", {"tokens": [-1]}), ("/v1/completions", {"prompt": [2, 10 ** 7]})):
        status, e = post(server + path, body)
        assert status == 400 and "token ids, each from 0 to 262" in e["error"]["message"], e
    assert post(server + "/v1/completions", {"prompt": [2], "seed": 2 ** 32 - 1})[0] == 400


def test_a_piece_longer_than_32_bytes_is_read_whole(server):
    word = "\u092a\u094d\u0930\u0927\u093e\u0928\u092e\u0902\u0924\u094d\u0930\u0940"  # 36 bytes in UTF-8
    ids = post(server + "/tokenize", {"prompt": " " + word, "add_special_tokens": False})[1]["tokens"]
    assert post(server + "/detokenize", {"tokens": ids})[1]["prompt"] == " " + word
