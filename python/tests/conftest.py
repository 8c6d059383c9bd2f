"""Puts python/ on sys.path and offers `cli`, which runs an anvil module as a command, and
`small_task`, a CPU-sized task file."""
import json
import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)
# The tests' anvil runs keep their builds, baselines and vet reports in the build tree's test cache
# (the C++ tests' too), never the user's ~/.cache/anvil: a baseline measured while the tests load
# the machine must not reach the user's later evaluations.
os.environ.setdefault("ANVIL_CACHE", os.path.join(os.path.dirname(PYTHON_DIR), "build", "test-cache"))


class CliResult:
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = proc.stdout.splitlines()
        assert len(lines) == 1, "expected exactly one line of JSON on stdout, got %r" % proc.stdout
        self.json = json.loads(lines[0])


@pytest.fixture
def cli():
    """cli("anvil.dataset", "file", "0") -> CliResult (exactly one JSON line on stdout)."""

    def run(module, *args, env=None):
        full_env = dict(os.environ, PYTHONPATH=PYTHON_DIR, **(env or {}))
        proc = subprocess.run([sys.executable, "-m", module] + [str(a) for a in args],
                              capture_output=True, text=True, env=full_env, timeout=300)
        return CliResult(proc)

    return run


@pytest.fixture(scope="session")
def small_task(tmp_path_factory):
    """examples/tasks/01_elementwise_chain.py at a CPU-friendly size (128 x 256), as a file's path."""
    text = open(os.path.join(os.path.dirname(PYTHON_DIR), "examples", "tasks", "01_elementwise_chain.py")).read()
    text = text.replace("ROWS = 4096", "ROWS = 128").replace("COLS = 4096", "COLS = 256")
    path = tmp_path_factory.mktemp("task") / "01_small.py"
    path.write_text(text)
    return str(path)


def pytest_configure(config):
    # A label, not a skip: CI runs every test; `-m "not slow"` leaves these out while you work.
    config.addinivalue_line("markers", "slow: a test of minutes (a real training run); CI runs it too")
