"""Real episode records checked against schemas/anvil.trajectory-1.schema.json: the built `anvil
agent` runs scripted episodes against tests/replay_server.py (chat mode and token-level, both judged
on the CPU), and their trajectory.json must validate, the embedded evaluation against
anvil.eval-1.schema.json; broken records must not."""
import copy
import json
import os

import pytest

import scripted_agent

ROOT = scripted_agent.ROOT
SCHEMAS = os.path.join(ROOT, "schemas")

pytestmark = pytest.mark.skipif(not os.access(scripted_agent.ANVIL, os.X_OK), reason="build/anvil is not built")


def validator():
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    from referencing.jsonschema import DRAFT202012

    schemas = [json.load(open(os.path.join(SCHEMAS, n))) for n in
               ("anvil.trajectory-1.schema.json", "anvil.eval-1.schema.json")]
    registry = referencing.Registry().with_resources((s["$id"], DRAFT202012.create_resource(s)) for s in schemas)
    jsonschema.Draft202012Validator.check_schema(schemas[0])
    return jsonschema.Draft202012Validator(schemas[0], registry=registry)


def errors(v, record):
    return ["%s: %s" % ("/".join(map(str, e.absolute_path)), e.message[:200]) for e in v.iter_errors(record)]


@pytest.fixture(scope="module")
def records(tmp_path_factory, small_task):
    """One solving episode in chat mode, one token-level, and one that gives up at once (its
    workdir has no kernels/: the final evaluation is a compile_error)."""
    out = tmp_path_factory.mktemp("episodes")
    got = {}
    quit_turns = [{"content": "Done.", "tool_calls": [scripted_agent.call("finish", {"summary": "nothing"})]}]
    for name, turns, tokens in (("chat", scripted_agent.solving_turns(), False),
                                ("tokens", scripted_agent.solving_turns(), True),
                                ("quit", quit_turns, False)):
        proc, files = scripted_agent.run_agent(str(out / name), small_task, turns, tokens=tokens)
        assert proc.returncode == 0 and len(files) == 1, proc.stderr[-3000:]
        got[name] = json.load(open(files[0]))
    return got


@pytest.mark.parametrize("name", ["chat", "tokens", "quit"])
def test_real_records_match_the_schema(records, name):
    rec = records[name]
    assert errors(validator(), rec) == []
    assert rec["status"] == "finished" and rec["end_reason"] == "finish"
    if name == "quit":
        # The evaluation of a workdir the build cannot scan names no binding mode (it was "", which
        # the eval schema refuses).
        assert rec["evaluation"]["outcome"] == "compile_error" and rec["reward"] == -1
        assert "mode" not in rec["evaluation"]["candidate"]
    else:
        assert rec["evaluation"]["outcome"] == "ok" and rec["reward"] >= 1
    assert rec.get("token_level", False) == (name == "tokens")


def test_turns_are_stamped_before_their_answers(records):
    """A turn starts when its request is sent: never before the episode, never after the next turn."""
    for rec in records.values():
        stamps = [rec["started_at"]] + [t["started_at"] for t in rec["turns"]] + [rec["ended_at"]]
        assert stamps == sorted(stamps), stamps


def test_the_schema_rejects_broken_records(records):
    v = validator()
    good = records["tokens"]
    breakages = {
        "another schema version": lambda r: r.update(schema="anvil.trajectory/0"),
        "an unknown end reason": lambda r: r.update(end_reason="gave_up"),
        "finished without an end": lambda r: r.pop("ended_at"),
        "a token-level turn without its sampled ids": lambda r: r["turns"][1].pop("token_ids"),
        "a prompt delta without its prefix": lambda r: r["turns"][0]["prompt_token_ids"].pop("prefix"),
        "an unknown prompt kind": lambda r: r["turns"][1].update(prompt_kind="system"),
        "an evaluation that is not anvil.eval/1": lambda r: r["evaluation"]["candidate"].update(mode=""),
        "a reward off the scale": lambda r: r.update(reward=0),
        "a tool message without its call id": lambda r: r["messages"][3].pop("tool_call_id"),
        "an unknown malformed kind": lambda r: r["counters"]["malformed"].update(made_up=1),
        "a turn stamped in local time": lambda r: r["turns"][0].update(started_at="2026-12-01 18:00:00"),
        "an error evaluation with a reward": lambda r: r.update(evaluation={"error": "no GPU"}, reward=1),
    }
    for what, breaks in breakages.items():
        rec = copy.deepcopy(good)
        breaks(rec)
        assert errors(v, rec), "the schema accepted " + what
    # A record whose evaluation could not be run is one.
    rec = copy.deepcopy(good)
    rec.update(evaluation={"error": "no GPU found"}, reward=-1)
    assert errors(v, rec) == []
