"""A scripted OpenAI-compatible model server: a real HTTP server that replays model turns.

Tests (and bench/agent_scripted.py) drive complete agent episodes through it: anvil's model client
speaks real HTTP to a separate process, the tools, builds and evaluations are real, and only the
model's words are scripted. Standard library only (runs with any python3, no torch).

    python3 tests/replay_server.py --script FILE.json [--port 0] [--log FILE.jsonl]

prints one line `PORT <n>` once it listens on 127.0.0.1, then serves until killed.

Script:
    {"model": "replay",                  served by GET /v1/models (default "replay")
     "turns": [TURN, ...],
     "faults": {"<turn>": ["503", "429", "500", "drop", "garbage", ...]},
                                         served in order, once each, before that turn's answer:
                                         an HTTP status with an error body ("429" carries
                                         Retry-After: 0), "drop" closes the connection without an
                                         answer, "garbage" is a 200 whose body is not JSON
     "max_context_chars": N}             a request whose json.dumps(messages) is longer gets
                                         vLLM's HTTP 400 "maximum context length" error
    TURN = {"content": str|null, "tool_calls": [{"name": str, "arguments": object|str}],
            "finish_reason": str (default: "tool_calls" with calls, else "stop"),
            "reasoning_content": str}

The turn answered is the number of assistant messages already in the request, so a retried request
or a resumed episode gets the right one. Arguments given as an object are sent as json.dumps of it;
given as a string, verbatim (malformed JSON on purpose). Tool call ids are call_<turn>_<i>. Past the
last turn the answer is a plain "(replay: no more scripted turns)". With "return_token_ids" the
response carries prompt_token_ids and the choice token_ids (the UTF-8 bytes of the answer, capped);
with "logprobs", choices[0].logprobs.content matches them. Every request is appended to --log as
{"turn", "path", "body", "answered"}.
"""
import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self, script, log):
        self.script = script
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
    turns = script.get("turns") or []
    if turn < len(turns):
        t = turns[turn]
    else:
        t = {"content": "(replay: no more scripted turns)"}
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
    resp = {"id": "replay-%d" % turn, "object": "chat.completion", "model": script.get("model", "replay"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(ids),
                      "total_tokens": len(prompt) // 4 + len(ids)}}
    if body.get("return_token_ids"):
        resp["prompt_token_ids"] = list(prompt.encode("utf-8"))[:4096]
        choice["token_ids"] = ids
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": chr(b) if 32 <= b < 127 else "<0x%02x>" % b, "logprob": -0.1,
                                           "bytes": [b]} for b in ids]}
    return resp


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

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self.send_json(200, {"object": "list",
                                     "data": [{"id": script.get("model", "replay"), "object": "model"}]})
            else:
                self.send_json(404, {"error": {"message": "no route %s" % self.path}})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self.send_json(404, {"error": {"message": "no route %s" % self.path}})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self.send_json(400, {"error": {"message": "the body is not JSON"}})
                return
            messages = body.get("messages") or []
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            entry = {"turn": turn, "path": self.path, "body": body}
            if body.get("model") != script.get("model", "replay"):
                entry["answered"] = 404
                state.record(entry)
                self.send_json(404, {"error": {"message": "The model `%s` does not exist." % body.get("model"),
                                               "type": "NotFoundError", "code": 404}})
                return
            fault = state.next_fault(turn)
            if fault is not None:
                entry["answered"] = fault
                state.record(entry)
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault == "garbage":
                    data = b"<html>upstream hiccup</html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                status = int(fault)
                self.send_json(status, {"object": "error", "message": "injected fault %d" % status,
                                        "type": "ServiceUnavailable", "code": status},
                               headers=[("Retry-After", "0")] if status == 429 else [])
                return
            limit = script.get("max_context_chars")
            size = len(json.dumps(messages))
            if limit and size > limit:
                entry["answered"] = 400
                state.record(entry)
                self.send_json(400, {"object": "error", "type": "BadRequestError", "code": 400,
                                     "message": "This model's maximum context length is %d tokens. However, you "
                                                "requested %d tokens in the messages. Please reduce the length of "
                                                "the messages." % (limit // 4, size // 4)})
                return
            entry["answered"] = 200
            state.record(entry)
            self.send_json(200, answer_for(script, turn, body))

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    a = ap.parse_args()
    with open(a.script) as f:
        script = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(State(script, a.log)))
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
