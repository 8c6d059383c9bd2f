"""Real episodes for the tests: the built `anvil agent` against tests/replay_server.py (a separate
process speaking real HTTP), with real tools, builds and evaluations on the CPU; only the model's
words are scripted. Used by test_trajectory_schema.py and test_rft.py."""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
CPU_SOLUTION = os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")

sys.path.insert(0, os.path.join(ROOT, "tests"))
import replay_server  # noqa: E402  (its toy tokenizer: toy_render, toy_text)


def call(name, args):
    return {"name": name, "arguments": args}


def solving_turns():
    """Turns that read the task, write the bundled CPU solution of task 01, compile, verify, finish."""
    writes = []
    for rel in ("kernels/elementwise_chain.cpp", "kernels/elementwise_chain_binding.cpp", "kernels/parallel.h",
                "model_new.py"):
        writes.append(call("write_file", {"path": rel, "content": open(os.path.join(CPU_SOLUTION, rel)).read()}))
    return [
        {"content": "I will read the reference first.",
         "tool_calls": [call("todo_write", {"todos": [{"content": "fuse the chain", "status": "in_progress"}]}),
                        call("read_file", {"path": "model.py"})]},
        {"content": None, "tool_calls": writes},
        {"content": None, "tool_calls": [call("compile", {})]},
        {"content": None, "tool_calls": [call("verify", {})]},
        {"content": "Done.", "tool_calls": [call("finish", {"summary": "one fused CPU kernel"})]},
    ]


def run_agent(out, task, turns, tokens=False, samples=1, extra=()):
    """Runs `anvil agent` on `task` with the scripted `turns` into out/run; returns (the process, the
    trajectory files sorted)."""
    os.makedirs(out, exist_ok=True)
    script = os.path.join(out, "script.json")
    with open(script, "w") as f:
        json.dump({"model": "replay", "turns": turns}, f)
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "replay_server.py"), "--script", script,
                               "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        env = dict(os.environ, ANVIL_PYTHON=os.environ.get("ANVIL_PYTHON") or sys.executable)
        cmd = [ANVIL, "agent", "--task", task, "--endpoint", "http://127.0.0.1:%d/v1" % port, "--model", "replay",
               "--out", os.path.join(out, "run"), "--samples", str(samples), "--concurrency", str(samples),
               "--no-ncu", "--device", "cpu", "--compile-mode", "none", "--max-tokens", "4096",
               "--max-turns", "20"] + (["--tokens"] if tokens else []) + list(extra)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    finally:
        server.kill()
        server.wait()
    return proc, sorted(glob.glob(os.path.join(out, "run", "**", "trajectory.json"), recursive=True))
