"""The local model server of `anvil agent --endpoint local` (issue 19): a GGUF model served on
loopback with llama-cpp-python (the library, not its server), token-in/token-out, in the shape of
vLLM's OpenAI-compatible server so that one client speaks to both:

  GET  /v1/models            {"data": [{"id": ALIAS, "max_model_len": N_CTX}]}
  POST /tokenize             {"prompt": TEXT} or {"messages": [...], "tools"?, "add_generation_prompt"?}
                             -> {"count", "max_model_len", "tokens"} (the model's own chat template)
  POST /detokenize           {"tokens": [...]} -> {"prompt": TEXT}
  POST /v1/completions       {"prompt": TEXT or [ids], "max_tokens", "temperature", "top_p", "top_k",
                             "seed", "stop", "logprobs", "return_token_ids"} -> choices[0]: text,
                             token_ids (every sampled id, the end-of-turn token included), logprobs
                             {"tokens", "token_logprobs"}; prompt_token_ids
  POST /v1/chat/completions  the messages rendered with the chat template, sampled as above, and the
                             model's <tool_call>{"name", "arguments"}</tool_call> blocks returned as
                             OpenAI tool_calls; prompt_token_ids, choices[0].token_ids, and
                             choices[0].logprobs.content [{"token", "logprob", "token_id"}]

Sampling is plain: temperature (1.0 unless given; 0: greedy), top-k and top-p only where the
request sets them (llama.cpp applies them before the temperature, vLLM after: the same only at
temperature 1 or without them); no min-p, no repetition penalty. A log-probability is the model's, before the
temperature (vLLM's default), of the token that was sampled. A request's seed makes it
reproducible; without one each request draws its own.

The chat template is the GGUF's (tokenizer.chat_template) where it has one, else
chat_templates/<family>.jinja beside this file (the Gemma 3 270M GGUF anvil installs carries none).
It renders with Jinja2's sandbox, no HTML escaping. A message's text is tokenized as the template's
is, special tokens included (as vLLM and Hugging Face do): a tool result that prints a turn marker
gives the model that marker. Tools reach the model as a system section that
lists their schemas and asks for <tool_call> blocks (templates without a tools section of their own,
as Gemma's). One request at a time holds the model.

    python -m anvil.local_model --model GGUF --port 8000 [--host 127.0.0.1] [--n-ctx 8192]
                                [--n-threads N] [--alias NAME] [--chat-template FILE]
"""
import argparse
import json
import math
import os
import re
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


class BadRequest(Exception):
    """The request cannot be served as sent: 400 with this message."""


def tools_section(tools):
    """The system prompt's part that gives a template without tool support the tools."""
    lines = ["# Tools", "", "You can call these functions. Their signatures, one JSON object a line:", "<tools>"]
    for t in tools:
        lines.append(json.dumps(t.get("function", t), ensure_ascii=False))
    lines += ["</tools>", "",
              "To call one, write a JSON object with its name and arguments between tags, and nothing after "
              "the last one:",
              '<tool_call>{"name": "NAME", "arguments": {"ARGUMENT": "VALUE"}}</tool_call>']
    return "\n".join(lines)


def with_tools(messages, tools, template_knows_tools):
    """The messages as the template gets them: the tools added to the system message (one is made
    where there is none) unless the template renders them itself."""
    if not tools or template_knows_tools:
        return messages
    section = tools_section(tools)
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = (text_of(first.get("content")) + "\n\n" + section).strip()
        return [first] + list(messages[1:])
    return [{"role": "system", "content": section}] + list(messages)


def text_of(content):
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def parse_tool_calls(text):
    """(content, tool_calls): the <tool_call> blocks whose JSON names a function, as OpenAI tool
    calls, and the text without them (None when nothing is left). A block that does not parse stays
    in the text, where the agent sees it as a malformed call."""
    calls, kept, last = [], [], 0
    for m in TOOL_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", {})
        calls.append({"id": "call_%d_%s" % (len(calls), uuid.uuid4().hex[:8]), "type": "function",
                      "function": {"name": obj["name"],
                                   "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})
        kept.append(text[last:m.start()])
        last = m.end()
    kept.append(text[last:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls


class Model:
    """One GGUF, its tokenizer and chat template; generate() and the renderings, one caller at a time."""

    def __init__(self, path, n_ctx, n_threads, alias, template_path=None):
        import llama_cpp
        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads or None, verbose=False)
        self.alias, self.n_ctx, self.lock = alias, n_ctx, threading.Lock()
        meta = self.llm.metadata or {}
        source = meta.get("tokenizer.chat_template")
        if template_path:
            source, self.template_from = open(template_path, encoding="utf-8").read(), template_path
        elif source:
            self.template_from = "the GGUF"
        else:
            arch = meta.get("general.architecture") or "unknown"
            self.template_from = os.path.join(HERE, "chat_templates", arch + ".jinja")
            if not os.path.isfile(self.template_from):
                raise SystemExit("the model %s has no chat template and anvil has none for its architecture %r "
                                 "(python/anvil/chat_templates/): give one with --chat-template" % (path, arch))
            source = open(self.template_from, encoding="utf-8").read()
        self.template = template_of(source)
        self.template_knows_tools = "tools" in source
        self._vocab = self.llm._model.vocab
        self.bos = self.piece(self.llm.token_bos())
        self.eos = self.piece(self.llm.token_eos())

    def _bytes(self, tokens):
        """The tokens' text, special ones written out, each piece read whole (llama-cpp-python's own
        detokenize reads at most 32 bytes a piece, and some of Gemma's are longer)."""
        import ctypes

        llama_cpp, buf, out = self.llama_cpp, ctypes.create_string_buffer(64), []
        for t in tokens:
            n = llama_cpp.llama_token_to_piece(self._vocab, llama_cpp.llama_token(t), buf, len(buf), 0, True)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, llama_cpp.llama_token(t), buf, len(buf), 0, True)
            out.append(buf.raw[:n])
        return out

    def piece(self, token):
        return self._bytes([token])[0].decode("utf-8", errors="replace")

    def check_ids(self, ids, field):
        n = self.llm.n_vocab()
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n
                                                for t in ids):
            raise BadRequest("%s: token ids, each from 0 to %d" % (field, n - 1))

    def is_end(self, token):
        if token == self.llm.token_eos():
            return True
        try:
            return bool(self.llama_cpp.llama_vocab_is_eog(self._vocab, token))
        except Exception:  # noqa: BLE001 - an older binding: the end of sequence only
            return False

    def render(self, messages, tools=None, add_generation_prompt=True):
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages: a list of objects")
        messages = with_tools(messages, tools, self.template_knows_tools)
        try:
            return self.template.render(messages=messages, tools=tools if self.template_knows_tools else None,
                                        add_generation_prompt=add_generation_prompt, bos_token=self.bos,
                                        eos_token=self.eos)
        except TemplateError as e:
            raise BadRequest("the chat template refused the messages: %s" % e)
        except Exception as e:  # noqa: BLE001 - jinja's own errors (an undefined name, a type) are the request's
            raise BadRequest("the chat template failed on the messages: %s: %s" % (type(e).__name__, e))

    def tokenize(self, text, add_special=False):
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)

    def detokenize(self, ids):
        return b"".join(self._bytes(ids)).decode("utf-8", errors="replace")

    def generate(self, prompt_ids, max_tokens, temperature=1.0, top_p=None, top_k=None, seed=None, stop=()):
        """(token_ids, logprobs, finish_reason): sampled after prompt_ids until an end-of-generation
        token (kept, as the last id), a stop string (the ids through the one that completed it) or
        max_tokens."""
        import numpy as np

        if not prompt_ids:
            raise BadRequest("prompt: empty")
        if len(prompt_ids) + 1 > self.n_ctx:
            raise BadRequest("This model's maximum context length is %d tokens; the prompt has %d"
                             % (self.n_ctx, len(prompt_ids)))
        max_tokens = min(max_tokens, self.n_ctx - len(prompt_ids))
        llm = self.llm
        llm.set_seed(seed if seed is not None else int.from_bytes(os.urandom(4), "little"))
        temp = 0.0 if temperature is not None and temperature <= 0 else (1.0 if temperature is None else temperature)
        ids, logprobs, finish = [], [], "length"
        n_vocab = llm.n_vocab()
        text = ""
        for token in llm.generate(prompt_ids, temp=temp, top_k=top_k if top_k and top_k > 0 else 0,
                                  top_p=top_p if top_p is not None else 1.0, min_p=0.0, typical_p=1.0,
                                  repeat_penalty=1.0, reset=True):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).astype(np.float64)
            top = logits.max()
            logprobs.append(float(logits[token] - top - math.log(np.exp(logits - top).sum())))
            ids.append(int(token))
            if self.is_end(token):
                finish = "stop"
                break
            if stop:
                text = self.detokenize(ids)
                if any(s and s in text for s in stop):
                    finish = "stop"
                    break
            if len(ids) >= max_tokens:
                break
        return ids, logprobs, finish

    def visible_text(self, ids, stop=()):
        """What the sampled ids say, without the end-of-generation token and from the first stop string on."""
        shown = ids[:-1] if ids and self.is_end(ids[-1]) else ids
        text = self.detokenize(shown)
        for s in stop or ():
            if s and s in text:
                text = text[:text.index(s)]
        return text


class TemplateError(Exception):
    pass


def template_of(source):
    """A chat template as Hugging Face's tokenizers render one: Jinja2's sandbox, blocks trimmed,
    nothing HTML-escaped (tojson included), raise_exception for the template's own refusals."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    return env.from_string(source)


def _raise(message):
    raise TemplateError(message)


def sampling_of(body):
    def number(name, kind, low=None):
        v = body.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
            raise BadRequest("%s: a number%s" % (name, " (an integer)" if kind is int else ""))
        if low is not None and v < low:
            raise BadRequest("%s: at least %s" % (name, low))
        return kind(v)

    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest("stop: a string or a list of strings")
    max_tokens = number("max_tokens", int, 1) or number("max_completion_tokens", int, 1) or 1024
    seed = number("seed", int, 0)
    if seed is not None and seed >= 0xFFFFFFFF:  # llama.cpp reads 0xFFFFFFFF as "random"
        raise BadRequest("seed: below %d" % 0xFFFFFFFF)
    return dict(max_tokens=max_tokens, temperature=number("temperature", float, 0), top_p=number("top_p", float, 0),
                top_k=number("top_k", int), seed=seed, stop=tuple(stop))


def usage(prompt, completion):
    return {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
            "total_tokens": len(prompt) + len(completion)}


def serve_completion(model, body):
    prompt = body.get("prompt")
    s = sampling_of(body)
    if isinstance(prompt, str):
        ids = model.tokenize(prompt, add_special=True)
    elif isinstance(prompt, list) and prompt:
        model.check_ids(prompt, "prompt")
        ids = prompt
    else:
        raise BadRequest("prompt: a string or a non-empty list of token ids")
    with model.lock:
        out, lps, finish = model.generate(ids, **s)
        text = model.visible_text(out, s["stop"])
        pieces = [model.piece(t) for t in out]
    choice = {"index": 0, "text": text, "finish_reason": finish}
    if body.get("return_token_ids", True):
        choice["token_ids"] = out
    if body.get("logprobs") is not None:
        choice["logprobs"] = {"tokens": pieces, "token_logprobs": lps}
    return {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
            "model": model.alias, "choices": [choice], "prompt_token_ids": list(ids), "usage": usage(ids, out)}


def serve_chat(model, body):
    tools = body.get("tools") or None
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("tools: a list")
    if body.get("tool_choice") == "none":
        tools = None
    s = sampling_of(body)
    text = model.render(body.get("messages"), tools, add_generation_prompt=True)
    ids = model.tokenize(text)
    with model.lock:
        out, lps, finish = model.generate(ids, **s)
        shown = model.visible_text(out, s["stop"])
        pieces = [model.piece(t) for t in out]
    content, calls = parse_tool_calls(shown) if tools else (shown, [])
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
        finish = "tool_calls" if finish == "stop" else finish
    choice = {"index": 0, "message": message, "finish_reason": finish}
    if body.get("return_token_ids", True):
        choice["token_ids"] = out
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": p, "logprob": lp, "token_id": t}
                                          for p, lp, t in zip(pieces, lps, out)]}
    return {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
            "model": model.alias, "choices": [choice], "prompt_token_ids": ids, "usage": usage(ids, out)}


def serve_tokenize(model, body):
    if "messages" in body:
        text = model.render(body["messages"], body.get("tools") or None,
                            add_generation_prompt=bool(body.get("add_generation_prompt", True)))
        ids = model.tokenize(text)
    elif isinstance(body.get("prompt"), str):
        ids = model.tokenize(body["prompt"], add_special=bool(body.get("add_special_tokens", True)))
    else:
        raise BadRequest("a prompt (a string) or messages")
    return {"count": len(ids), "max_model_len": model.n_ctx, "tokens": ids}


def serve_detokenize(model, body):
    tokens = body.get("tokens")
    model.check_ids(tokens, "tokens")
    return {"prompt": model.detokenize(tokens)}


def app_for(model):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="anvil local model")

    def route(fn):
        async def handler(request: Request):
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"error": {"message": "the body is not JSON", "type": "invalid_request_error"}}, 400)
            if not isinstance(body, dict):
                return JSONResponse({"error": {"message": "the body is not a JSON object",
                                               "type": "invalid_request_error"}}, 400)
            try:
                import anyio

                return JSONResponse(await anyio.to_thread.run_sync(fn, model, body))
            except BadRequest as e:
                return JSONResponse({"error": {"message": str(e), "type": "invalid_request_error"}}, 400)
        return handler

    app.post("/v1/completions")(route(serve_completion))
    app.post("/v1/chat/completions")(route(serve_chat))
    app.post("/tokenize")(route(serve_tokenize))
    app.post("/detokenize")(route(serve_detokenize))

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model.alias, "object": "model", "owned_by": "anvil",
                                            "max_model_len": model.n_ctx}]}

    return app


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.local_model", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--n-threads", type=int, default=0)
    ap.add_argument("--alias", default="local")
    ap.add_argument("--chat-template", help="a Jinja chat template (default: the GGUF's, else anvil's for its family)")
    a = ap.parse_args(argv)
    import uvicorn

    model = Model(a.model, a.n_ctx, a.n_threads, a.alias, a.chat_template)
    print("anvil.local_model: %s as %r, context %d, chat template from %s" % (a.model, a.alias, a.n_ctx,
                                                                               model.template_from), flush=True)
    uvicorn.run(app_for(model), host=a.host, port=a.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
