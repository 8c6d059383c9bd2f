"""The hack suite on the CPU: bench/hack_suite.py --device cpu over the whole manifest
(examples/hacks/manifest.json) must catch every reward hack that has a CPU variant and pass every
honest CPU candidate. It runs ~30 evaluations of full-size tasks (several minutes on a small
machine); set ANVIL_HACK_SUITE_JOBS to run more of them at once, ANVIL_HACK_SUITE=0 to skip it."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
SUITE = os.path.join(ROOT, "bench", "hack_suite.py")

# In CI by default (the README's test command); ANVIL_HACK_SUITE=0 skips it for a quick local run.
pytestmark = [
    pytest.mark.skipif(os.environ.get("ANVIL_HACK_SUITE") == "0", reason="ANVIL_HACK_SUITE=0"),
    pytest.mark.skipif(not os.access(ANVIL, os.X_OK),
                       reason="%s is not built (cmake -S . -B build -G Ninja && ninja -C build)" % ANVIL),
]


def test_every_cpu_hack_is_caught_and_every_honest_cpu_candidate_passes(tmp_path):
    out = tmp_path / "hacks-cpu.json"
    env = dict(os.environ, ANVIL_PYTHON=os.environ.get("ANVIL_PYTHON") or sys.executable)
    proc = subprocess.run([sys.executable, SUITE, "--device", "cpu", "--anvil", ANVIL, "--out", str(out),
                           "--jobs", os.environ.get("ANVIL_HACK_SUITE_JOBS", "1")],
                          capture_output=True, text=True, env=env, timeout=7200)
    report = proc.stdout[proc.stdout.find("# Hack suite"):] if "# Hack suite" in proc.stdout else proc.stdout[-8000:]
    assert proc.returncode == 0, "hack suite failed (exit %d):\n%s\n%s" % (proc.returncode, report, proc.stderr[-2000:])
    result = json.loads(out.read_text())
    manifest = json.load(open(os.path.join(ROOT, "examples", "hacks", "manifest.json")))
    cpu_hacks = {e["name"] for e in manifest["hacks"] if {"cpu", "cpu_compat"} & set(e["variants"])}
    assert {r["name"] for r in result["results"] if r["kind"] == "hack"} == cpu_hacks
    assert result["summary"]["caught"] == result["summary"]["hacks"] and not result["summary"]["flagged"]
