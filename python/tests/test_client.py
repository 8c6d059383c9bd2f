"""anvil.client against a real `anvil serve` (CPU variants): evaluations by path and by text (a
KernelBench single file sent as its source, judged with every defense on), concurrent submissions,
an idempotent retry, and the server's errors raised with the field they name."""
import asyncio
import json
import os
import re

import jsonschema
import pytest

from anvil.client import Client, ServeError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
KB = os.path.join(ROOT, "examples", "kernelbench", "cpu")

pytestmark = pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL)


def schema(name):
    return json.load(open(os.path.join(ROOT, "schemas", "anvil.serve-%s-1.schema.json" % name)))


class Recording(Client):
    """A Client whose every call is checked against the published schemas (schemas/anvil.serve-*)."""

    checked = []

    def _call(self, method, path, body=None, headers=None, timeout=None):
        status, payload, hdrs = super()._call(method, path, body, headers, timeout)
        if method == "POST" and path == "/v1/evaluations" and status < 400:  # what it accepts, the schema allows
            jsonschema.validate(body, schema("request"))
        session = re.match(r"^/v1/sessions(?:/[0-9a-f]+(/calls|/finalize)?)?$", path)
        if session and method == "POST" and status < 400:
            jsonschema.validate(body or {}, schema("session-calls" if session.group(1) == "/calls" else
                                                   "session-request") if session.group(1) != "/finalize" else {})
        if status >= 400:
            jsonschema.validate(payload, schema("error"))
        elif session:
            kind = {("POST", None): "session-opened", ("GET", None): "session-state", ("DELETE", None): "session-ended",
                    ("POST", "/calls"): "session-results", ("POST", "/finalize"): "session-finalized"}
            jsonschema.validate(payload, schema(kind[(method, session.group(1) if path != "/v1/sessions" else None)]))
        elif path.startswith("/v1/evaluations/") and method == "GET":
            jsonschema.validate(payload, schema("evaluation"))
            if payload["status"] == "done" and payload["evaluation"]:
                jsonschema.validate(payload["evaluation"], json.load(open(os.path.join(ROOT, "schemas",
                                                                                        "anvil.eval-1.schema.json"))))
        elif method == "POST":
            jsonschema.validate(payload, schema("accepted"))
        Recording.checked.append((method, path.split("?")[0].rsplit("/", 1)[0], status))
        return status, payload, hdrs


@pytest.fixture(scope="module")
def server(cpu_serve):
    return cpu_serve


def test_a_kernelbench_single_file_sent_as_text_is_judged_with_its_protocol(server):
    async def go():
        async with Recording(server) as c:
            assert (await c.health())["status"] == "ok"
            task = {"source": open(os.path.join(KB, "add_model.py")).read(), "name": "add_model.py"}
            cand = {"source": open(os.path.join(KB, "add_model_new.py")).read()}
            return await asyncio.gather(
                c.evaluate(task, cand, {"protocol": "kernelbench", "seed": 3}, limit=600),
                c.evaluate(task, cand, {"protocol": "cuda-agent", "seed": 3}, limit=600))

    results = asyncio.run(go())
    for r in results:
        assert r["status"] == "done", r
        assert r["outcome"] == "ok", json.dumps(r)[:2000]
        assert r["evaluation"]["candidate"]["kind"] == "file"  # a KernelBench single file
        assert r["evaluation"]["defenses"]["enabled"] is True
    assert [r["evaluation"]["protocol"]["name"] for r in results] == ["kernelbench", "cuda-agent"]


def test_concurrent_submissions_each_answered_once(server, small_task):
    cand = {"path": os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")}
    wrong = {"path": os.path.join(ROOT, "examples", "broken", "wrong_math", "cpu")}

    async def go():
        async with Recording(server) as c:
            jobs = [c.evaluate({"path": small_task}, cand if i % 2 == 0 else wrong, {"seed": i}, limit=600)
                    for i in range(6)]
            results = await asyncio.gather(*jobs)
            # A retry with the key of a finished evaluation is that evaluation, not another run.
            first = await c.submit({"path": small_task}, cand, key="same-key")
            again = await c.submit({"path": small_task}, cand, key="same-key")
            return results, first, again, await c.metrics()

    results, first, again, metrics = asyncio.run(go())
    assert [r["outcome"] for r in results] == ["ok", "wrong_answer"] * 3
    assert len({r["id"] for r in results}) == 6
    assert first == again
    assert 'anvil_evaluations_total{outcome="wrong_answer"} 3' in metrics


def test_errors_name_their_field(server):
    async def go():
        async with Recording(server) as c:
            with pytest.raises(ServeError) as e:
                await c.submit({"path": "/no/such/file.py"}, {"source": "x"})
            assert e.value.status == 400 and e.value.field == "task.path"
            with pytest.raises(ServeError) as e:
                await c.submit({"source": "x", "name": "../t.py"}, {"source": "x"})
            assert e.value.field == "task.name"
            with pytest.raises(ServeError) as e:
                await c.result("999999")
            assert e.value.status == 404

    asyncio.run(go())


def test_a_session_driven_from_outside_is_judged_like_an_episode(server, small_task):
    """What a trainer's rollout worker does: open a session, run the model's tool calls (here a
    scripted model's: the CPU candidate written, compiled, verified), finalize, end it."""
    cand = os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")
    files = {os.path.relpath(os.path.join(d, f), cand): open(os.path.join(d, f)).read()
             for d, _, fs in os.walk(cand) for f in fs}

    async def go():
        async with Recording(server) as c:
            s = await c.create_session({"path": small_task}, {"seed": 5})
            names = {t["function"]["name"] for t in s["tools"]}
            assert {"bash", "write_file", "compile", "verify", "profile", "finish"} <= names
            assert s["messages"][0]["role"] == "system" and "model.py" in s["messages"][1]["content"]
            with pytest.raises(ServeError) as e:
                await c.call_tools(s["id"], [{"name": "write_file", "arguments": {"path": "x", "content": "y"}},
                                             {"name": "launch_missiles"}])
            assert e.value.status == 400 and e.value.field == "calls[1].name"
            calls = [{"name": "write_file", "arguments": json.dumps({"path": p, "content": t})} for p, t in files.items()]
            results = await c.call_tools(s["id"], calls + [{"name": "compile", "arguments": {}},
                                                           {"name": "verify", "arguments": {}},
                                                           {"name": "finish", "arguments": {}}])
            assert [r["name"] for r in results] == [c_["name"] for c_ in calls] + ["compile", "verify", "finish"]
            assert not any(r["error"] for r in results), results
            assert results[-2]["content"].startswith("CORRECT"), results[-2]
            assert results[-1]["finish"] is True
            state = await c.session(s["id"])
            assert state["finished"] is True and state["calls"] == len(calls) + 3
            final, again = await asyncio.gather(c.finalize(s["id"], limit=600), c.finalize(s["id"], limit=600))
            ended = await c.end_session(s["id"])
            with pytest.raises(ServeError) as gone:
                await c.session(s["id"])
            return final, again, ended, gone.value

    final, again, ended, gone = asyncio.run(go())
    assert final["outcome"] == "ok" and final["reward"] >= 1, json.dumps(final)[:2000]
    assert again["id"] == final["id"]  # finalize asked twice: one evaluation
    assert ended["deleted"] is True
    assert gone.status == 404 and gone.field == "session"


class LosesAnswers(Recording):
    """A client whose first answer to each of `lose` (method, path) is lost after the server made
    it: what a cut connection or a server killed before answering does."""

    def __init__(self, url, lose):
        super().__init__(url)
        self.lose, self.sent = set(lose), []

    def _call(self, method, path, body=None, headers=None, timeout=None):
        answer = super()._call(method, path, body, headers, timeout)
        route = (method, "/v1/sessions" if path == "/v1/sessions" else "/v1/sessions/ID")
        self.sent.append((route, dict(headers or {}).get("Idempotency-Key")))
        if route in self.lose:
            self.lose.discard(route)
            raise ConnectionResetError("the answer was lost")
        return answer


def test_a_session_whose_answers_were_lost_is_made_once_and_ended_once(server, small_task):
    """A creation whose answer is lost is sent again with its idempotency key: the same session
    comes back ("existed"), not a second; a DELETE whose answer is lost, sent again, ends it once."""

    async def go():
        async with LosesAnswers(server, {("POST", "/v1/sessions"), ("DELETE", "/v1/sessions/ID")}) as c:
            before = (await c.health())["sessions"]
            s = await c.create_session({"path": small_task})
            made = (await c.health())["sessions"] - before
            ended = await c.end_session(s["id"])
            with pytest.raises(ServeError) as gone:
                await c.session(s["id"])
            return s, made, ended, gone.value, c.sent

    s, made, ended, gone, sent = asyncio.run(go())
    creates = [k for route, k in sent if route == ("POST", "/v1/sessions")]
    assert len(creates) == 2 and creates[0] and creates[0] == creates[1], sent  # one key, sent twice
    assert s["existed"] is True and made == 1
    assert ended["deleted"] is True and gone.status == 404


def test_every_message_had_its_schema():
    """(after the others) what the schemas were checked on: accepted, evaluation, error bodies."""
    kinds = {(m, p, s // 100) for m, p, s in Recording.checked}
    assert ("POST", "/v1", 2) in kinds  # POST /v1/evaluations accepted
    assert ("GET", "/v1/evaluations", 2) in kinds
    assert ("POST", "/v1", 4) in kinds and ("GET", "/v1/evaluations", 4) in kinds
    assert ("POST", "/v1", 2) in kinds  # a session opened
    assert any(m == "POST" and p.startswith("/v1/sessions/") and s == 2 for m, p, s in kinds)  # calls, finalize
