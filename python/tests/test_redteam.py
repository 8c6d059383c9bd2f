"""The red team on the CPU (CI): every attack of examples/redteam (bench/redteam_suite.py) must end
with reward -1 (or, for the claims only a GPU can prove forged, reward 1 and the claim not credited:
the manifest's expect_cpu), the expected outcome and reason, and its side-effect checks holding; and the agent's
doors (bench/redteam_agent.py: a scripted malicious model through `anvil agent`) must hold.
ANVIL_REDTEAM=0 skips both for a quick local run."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")

pytestmark = [
    pytest.mark.skipif(os.environ.get("ANVIL_REDTEAM") == "0", reason="ANVIL_REDTEAM=0"),
    pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL),
]


def _run(script, *args):
    env = dict(os.environ, ANVIL_PYTHON=os.environ.get("ANVIL_PYTHON") or sys.executable, ANVIL_BIN=ANVIL)
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), *args], capture_output=True, text=True,
                          env=env, timeout=3600)


def test_every_attack_is_caught_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "redteam.json"
    proc = _run("redteam_suite.py", "--device", "cpu", "--out", str(out))
    table = proc.stdout[proc.stdout.find("# Red team"):] if "# Red team" in proc.stdout else proc.stdout[-6000:]
    assert proc.returncode == 0, "red team failed:\n%s\n%s" % (table, proc.stderr[-2000:])
    result = json.loads(out.read_text())
    manifest = json.load(open(os.path.join(ROOT, "examples", "redteam", "manifest.json")))
    assert {r["name"] for r in result["results"] if r["kind"] == "attack"} == {
        a["name"] for a in manifest["attacks"] if a.get("expect_cpu") != "skip"}  # "skip": a GPU's alone
    assert all(r["pass"] for r in result["results"])


def test_the_agents_doors_hold(tmp_path):
    proc = _run("redteam_agent.py", "--device", "cpu", "--out", str(tmp_path / "agent"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    checks = json.loads((tmp_path / "agent" / "checks.json").read_text())["checks"]
    assert len(checks) >= 9 and all(c["holds"] for c in checks)
