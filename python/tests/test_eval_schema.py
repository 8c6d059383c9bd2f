"""`anvil eval --json` end to end on the CPU variants, checked against the published JSON Schema
(schemas/anvil.eval-1.schema.json), with the exit-status contract."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(ROOT, "schemas", "anvil.eval-1.schema.json")
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")

pytestmark = pytest.mark.skipif(not os.path.exists(ANVIL), reason="build/anvil is not built")


def anvil_eval(task, candidate, *extra):
    env = dict(os.environ, ANVIL_PYTHON=sys.executable)
    proc = subprocess.run([ANVIL, "eval", "--json", "--task", task, "--candidate", candidate,
                           "--compile-mode", "none", "--calls", "5", "--trials", "2", *extra],
                          capture_output=True, text=True, env=env, timeout=600)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize("candidate,outcome", [
    ("examples/candidates/01_elementwise_chain/cpu", "ok"),
    ("examples/broken/wrong_math/cpu", "wrong_answer"),
    ("examples/broken/compile_error/cpu", "compile_error"),
    ("examples/broken/crash/cpu", "runtime_error"),
])
def test_results_match_the_schema(small_task, candidate, outcome):
    jsonschema = pytest.importorskip("jsonschema")
    rc, result, err = anvil_eval(small_task, os.path.join(ROOT, candidate))
    assert rc == 0, err  # evaluated, whatever the outcome
    jsonschema.validate(result, json.load(open(SCHEMA)))
    assert result["outcome"] == outcome
    assert (result["reward"] >= 1) == (outcome == "ok")


def test_schema_rejects_an_inconsistent_result(small_task):
    jsonschema = pytest.importorskip("jsonschema")
    _, result, _ = anvil_eval(small_task, os.path.join(ROOT, "examples/candidates/01_elementwise_chain/cpu"))
    result["outcome"] = "wrong_answer"  # a wrong answer may not keep a positive reward
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(result, json.load(open(SCHEMA)))


def test_could_not_evaluate_exits_2(small_task):
    rc, result, err = anvil_eval(small_task, "/no/such/candidate")
    assert rc == 2
    assert result == {"schema": "anvil.eval/1", "evaluated": False, "error_kind": "usage",
                      "error": "candidate /no/such/candidate does not exist"}
    assert "could not evaluate (usage error)" in err
