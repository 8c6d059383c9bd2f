"""A scripted OpenAI-compatible model server: a real HTTP server that replays model turns.

Tests (and bench/agent_scripted.py) drive complete agent episodes through it: anvil's model client
speaks real HTTP to a separate process, the tools, builds and evaluations are real, and only the
model's words are scripted. Standard library only (runs with any python3, no torch).

    python3 tests/replay_server.py --script FILE.json [--port 0] [--log FILE.jsonl]

prints exactly one line `PORT <n>` (flushed) once it listens on 127.0.0.1, then serves until killed.

Script (a JSON object):
    {"model": "replay",                  served by GET /v1/models (default "replay"); a chat request
                                         for another model gets 404 "The model `x` does not exist."
     "turns": [TURN, ...],
     "faults": {"<turn>": [FAULT, ...]}, served in order, once each, before that turn's real answer
     "max_context_chars": N,             a request whose json.dumps(messages) is longer gets vLLM's
                                         HTTP 400 "This model's maximum context length is ..." error
     "reject_fields": ["top_k", ...],    a request carrying one of these fields gets OpenAI's HTTP 400
                                         "Unrecognized request argument supplied: top_k"
     "models_route": true,               false: GET /v1/models answers 404 (servers without it)
     "usage": false}                     no answer carries "usage" (a server that counts nothing);
                                         default: every answer does (below), unless its turn says

    TURN  = {"content": str|null,
             "tool_calls": [{"name": str, "arguments": object|str}],
             "finish_reason": str,       default "tool_calls" when there are calls, else "stop"
             "reasoning_content": str,   optional, copied into the message
             "delay_s": float,           optional, seconds the answer waits (a slow model)
             "usage": object|null}       optional, this turn's "usage" exactly as given (exact token
                                         counts for a test); null: the answer has none
    FAULT = "503", "500", "429", ...     that HTTP status with a JSON error body; "429" carries
                                         "Retry-After: 0", "429:N" carries "Retry-After: N"
          | "drop"                       the connection is closed without an answer
          | "garbage"                    HTTP 200 whose body is not JSON

The turn answered is the number of assistant messages already in the request, so a retried request
or a resumed episode gets the right one, and faults are counted per turn. Arguments given as an
object are sent as json.dumps of it; given as a string, verbatim (malformed JSON on purpose). Tool
call ids are call_<turn>_<i>. Past the last turn the answer is a plain
"(replay: no more scripted turns)" with finish_reason "stop".

Token ids (deterministic, for the RL fields): with "return_token_ids": true in the request, the
response carries "prompt_token_ids" (the UTF-8 bytes of json.dumps(messages), at most 4096) and the
choice "token_ids" (the UTF-8 bytes of the content and the tool-call arguments, at most 2048); with
"logprobs": true, choices[0].logprobs.content holds one {"token", "logprob": -0.1, "bytes"} per token
id. "usage" is present unless the script or the turn says otherwise (by default prompt_tokens =
len(json.dumps(messages)) // 4, completion_tokens = the number of token ids above).

Token-in/token-out (vLLM's endpoints, for `anvil agent --tokens`), with a toy tokenizer: the UTF-8
bytes of the text, and ids from 256 on for the markers <bos> <|system|> <|user|> <|assistant|>
<|tool|> <|end|>. The template: <bos>, then each message as <|ROLE|>, its content (an assistant's
tool calls after it as <tool_call>{"name": N, "arguments": A}</tool_call>, A as sent), <|end|> and
a newline; the generation prompt is <|assistant|>.
    POST /tokenize {"messages", "add_generation_prompt"} or {"prompt"} -> {"tokens", "count"}
    POST /detokenize {"tokens"} -> {"prompt"}
    POST /v1/completions {"prompt": [ids]}: the turn is the number of <|assistant|> ids in the
         prompt less one; its text (the content, then its tool calls as the template writes them)
         as token_ids followed by <|end|> (finish_reason "stop"; "length" as scripted: no <|end|>),
         logprobs {"tokens", "token_logprobs": -0.1 each}

Every request, GET included, is appended to --log as one JSON line
{"turn": int|null, "path": str, "body": object|null, "authorization": str|null, "answered": int|str}
("answered": the HTTP status sent, or "drop").
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    """The script, the request log and the faults not yet served (shared by the handler threads)."""

    def __init__(self, script, log):
        self.script = script
        self.model = script.get("model", "replay")
        self.log = log
        self.lock = threading.Lock()
        self.faults = {int(k): list(v) for k, v in (script.get("faults") or {}).items()}

    def record(self, entry):
        if self.log:
            with self.lock, open(self.log, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def next_fault(self, turn):
        with self.lock:
            queue = self.faults.get(turn) or []
            return queue.pop(0) if queue else None


def answer_for(script, turn, body):
    """The chat.completion for `turn`, with the token fields the request asked for."""
    turns = script.get("turns") or []
    t = turns[turn] if turn < len(turns) else {"content": "(replay: no more scripted turns)"}
    message = {"role": "assistant", "content": t.get("content")}
    if t.get("reasoning_content") is not None:
        message["reasoning_content"] = t["reasoning_content"]
    calls = []
    for i, c in enumerate(t.get("tool_calls") or []):
        args = c.get("arguments", {})
        calls.append({"id": "call_%d_%d" % (turn, i), "type": "function",
                      "function": {"name": c["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
    if calls:
        message["tool_calls"] = calls
    finish = t.get("finish_reason") or ("tool_calls" if calls else "stop")
    text = (message["content"] or "") + "".join(c["function"]["arguments"] for c in calls)
    ids = list(text.encode("utf-8"))[:2048] or [0]
    prompt = json.dumps(body.get("messages"))
    choice = {"index": 0, "message": message, "finish_reason": finish}
    resp = set_usage({"id": "replay-%d" % turn, "object": "chat.completion", "model": script.get("model", "replay"),
                      "choices": [choice]}, script, turn,
                     {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(ids),
                      "total_tokens": len(prompt) // 4 + len(ids)})
    if body.get("return_token_ids"):
        resp["prompt_token_ids"] = list(prompt.encode("utf-8"))[:4096]
        choice["token_ids"] = ids
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": chr(b) if 32 <= b < 127 else "<0x%02x>" % b, "logprob": -0.1,
                                           "bytes": [b]} for b in ids]}
    return resp


def set_usage(resp, script, turn, default):
    """resp["usage"]: the turn's own when its script gives one (null: none), else `default`, unless
    the script's "usage" is false (no usage at all)."""
    turns = script.get("turns") or []
    t = turns[turn] if turn < len(turns) else {}
    usage = t["usage"] if "usage" in t else (None if script.get("usage") is False else default)
    if usage is not None:
        resp["usage"] = usage
    return resp


def delay_for(script, turn):
    """Waits the turn's "delay_s", if any."""
    turns = script.get("turns") or []
    if turn < len(turns) and turns[turn].get("delay_s"):
        time.sleep(float(turns[turn]["delay_s"]))


MARKERS = ["<bos>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]
MARKER_ID = {m: 256 + i for i, m in enumerate(MARKERS)}


def toy_tokens(text):
    """The toy tokenizer: markers to their ids, everything else byte by byte."""
    ids, i = [], 0
    while i < len(text):
        for m in MARKERS:
            if text.startswith(m, i):
                ids.append(MARKER_ID[m])
                i += len(m)
                break
        else:
            ids.extend(text[i].encode("utf-8"))
            i += 1
    return ids


def toy_text(ids):
    out, pending = [], bytearray()
    for t in ids:
        if t >= 256:
            out.append(pending.decode("utf-8", "replace"))
            pending = bytearray()
            out.append(MARKERS[t - 256] if t - 256 < len(MARKERS) else "<?>")
        else:
            pending.append(t)
    out.append(pending.decode("utf-8", "replace"))
    return "".join(out)


def calls_text(calls):
    return "".join('<tool_call>{"name": %s, "arguments": %s}</tool_call>' % (
        json.dumps(c["function"]["name"]), c["function"]["arguments"]) for c in calls)


def toy_render(messages, add_generation_prompt):
    parts = ["<bos>"]
    for m in messages:
        parts.append("<|%s|>%s%s<|end|>\n" % (m.get("role"), m.get("content") or "", calls_text(m.get("tool_calls") or [])))
    if add_generation_prompt:
        parts.append("<|assistant|>")
    return "".join(parts)


def completion_for(script, body):
    prompt = body.get("prompt") or []
    turn = max(0, sum(1 for t in prompt if t == MARKER_ID["<|assistant|>"]) - 1)
    chat = answer_for(script, turn, {})
    c = chat["choices"][0]
    text = (c["message"]["content"] or "") + calls_text(c["message"].get("tool_calls") or [])
    finish = "length" if c["finish_reason"] == "length" else "stop"
    ids = toy_tokens(text) + ([MARKER_ID["<|end|>"]] if finish == "stop" else [])
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish,
              "logprobs": {"tokens": [toy_text([t]) for t in ids], "token_logprobs": [-0.1] * len(ids)}}
    return set_usage({"id": "replay-cmpl-%d" % turn, "object": "text_completion", "model": script.get("model", "replay"),
                      "choices": [choice], "prompt_token_ids": prompt}, script, turn,
                     {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)})


def make_handler(state):
    script = state.script

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_json(self, status, obj, headers=()):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def answer(self, entry, status, obj, headers=()):
            """Logs the request with its status, then sends the answer."""
            entry["answered"] = status
            state.record(entry)
            self.send_json(status, obj, headers)

        def entry(self, turn=None, body=None):
            return {"turn": turn, "path": self.path, "body": body,
                    "authorization": self.headers.get("Authorization")}

        def not_found(self, entry):
            self.answer(entry, 404, {"error": {"message": "no route %s %s" % (self.command, self.path),
                                               "type": "NotFoundError", "code": 404}})

        def do_GET(self):
            entry = self.entry()
            if self.path.rstrip("/") == "/v1/models" and script.get("models_route", True):
                self.answer(entry, 200, {"object": "list", "data": [{"id": state.model, "object": "model"}]})
            else:
                self.not_found(entry)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path = self.path.rstrip("/")
            if path not in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"):
                self.not_found(self.entry())
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self.answer(self.entry(), 400, {"error": {"message": "the body is not JSON"}})
                return
            if path == "/tokenize":
                text = toy_render(body.get("messages") or [], body.get("add_generation_prompt", True)) \
                    if "messages" in body else body.get("prompt", "")
                ids = toy_tokens(text)
                self.answer(self.entry(None, body), 200, {"tokens": ids, "count": len(ids), "max_model_len": 1 << 20})
                return
            if path == "/detokenize":
                self.answer(self.entry(None, body), 200, {"prompt": toy_text(body.get("tokens") or [])})
                return
            if path == "/v1/completions":
                prompt = body.get("prompt") or []
                delay_for(script, max(0, sum(1 for t in prompt if t == MARKER_ID["<|assistant|>"]) - 1))
                self.answer(self.entry(None, body), 200, completion_for(script, body))
                return
            messages = body.get("messages") or []
            turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
            entry = self.entry(turn, body)
            if body.get("model") != state.model:
                self.answer(entry, 404, {"error": {"message": "The model `%s` does not exist." % body.get("model"),
                                                   "type": "NotFoundError", "code": 404}})
                return
            fault = state.next_fault(turn)
            if fault is not None:
                self.serve_fault(entry, str(fault))
                return
            refused = [f for f in script.get("reject_fields") or [] if f in body]
            if refused:
                self.answer(entry, 400, {"error": {"message": "Unrecognized request argument supplied: %s" % refused[0],
                                                   "type": "invalid_request_error", "param": None, "code": None}})
                return
            limit = script.get("max_context_chars")
            size = len(json.dumps(messages))
            if limit and size > limit:
                self.answer(entry, 400, {"object": "error", "type": "BadRequestError", "code": 400,
                                         "message": "This model's maximum context length is %d tokens. However, you "
                                                    "requested %d tokens in the messages. Please reduce the length of "
                                                    "the messages." % (limit // 4, size // 4)})
                return
            delay_for(script, turn)
            self.answer(entry, 200, answer_for(script, turn, body))

        def serve_fault(self, entry, fault):
            if fault == "drop":
                entry["answered"] = "drop"
                state.record(entry)
                self.close_connection = True
                self.connection.shutdown(2)  # SHUT_RDWR: the client sees the connection end, no answer
                return
            if fault == "garbage":
                entry["answered"] = 200
                state.record(entry)
                data = b"<html>upstream hiccup</html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            status, _, after = fault.partition(":")
            status = int(status)
            headers = [("Retry-After", after or "0")] if status == 429 else []
            self.answer(entry, status, {"object": "error", "message": "injected fault %d" % status,
                                        "type": "ServiceUnavailable", "code": status}, headers)

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog (5) drops the SYNs of a burst of concurrent clients,
    # which then wait a second to retransmit.
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    a = ap.parse_args()
    with open(a.script) as f:
        script = json.load(f)
    server = Server(("127.0.0.1", a.port), make_handler(State(script, a.log)))
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
