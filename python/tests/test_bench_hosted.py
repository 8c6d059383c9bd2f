"""scripts/bench_hosted.sh: a suite run with an OpenAI-compatible model through `anvil bench --agent`,
the model's tokens and their cost in results.json and report.md, the API key from the environment
and nowhere in the run directory (docs/bench.md, "Tokens and cost", "A hosted model").

Against tests/replay_server.py (a real HTTP server in its own process; only the model's words and
its usage counts are scripted, the tools, builds and evaluations are real, on the CPU), and against
the local Gemma 3 270M (`--endpoint local`, llama.cpp), whose counts nobody scripted."""
import glob
import json
import os
import secrets
import subprocess
import sys

import pytest

from conftest import ANVIL, ROOT, local_gguf

SCRIPT = os.path.join(ROOT, "scripts", "bench_hosted.sh")
# Quick CPU evaluations; no ncu (no GPU); a short system prompt (the local model reads it on 2 cores).
QUICK = ["--device", "cpu", "--compile-mode", "none", "--calls", "3", "--warmup", "1", "--input-sets", "2",
         "--trials", "2", "--no-progress", "--no-ncu"]

# Two turns per episode with the usage a server would send, exactly: 4000 prompt and 1000 completion
# tokens an episode. The first turn is a model after the key: it runs `env` and echoes both variables.
TURNS = [
    {"content": "Let me look around first.",
     "tool_calls": [{"name": "bash", "arguments": {"command": "env; echo key=$ANVIL_API_KEY/$OPENAI_API_KEY"}}],
     "usage": {"prompt_tokens": 1500, "completion_tokens": 600, "total_tokens": 2100}},
    {"content": "Done.", "tool_calls": [{"name": "finish", "arguments": {"summary": "nothing yet"}}],
     "usage": {"prompt_tokens": 2500, "completion_tokens": 400, "total_tokens": 2900}},
]


def chain_task(rows, cols, scale):
    text = open(os.path.join(ROOT, "examples", "tasks", "01_elementwise_chain.py")).read()
    return text.replace("ROWS = 4096", "ROWS = %d" % rows).replace("COLS = 4096", "COLS = %d" % cols) \
        .replace("SCALE = 1.5", "SCALE = %s" % scale)


def make_suite(root, tasks):
    """tasks: {"level1/1_ChainSmall.py": (rows, cols, scale)} -> the suite's folder."""
    for rel, (rows, cols, scale) in tasks.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(chain_task(rows, cols, scale))
    return root


class Replay:
    """tests/replay_server.py serving `script`; every request logged to self.log."""

    def __init__(self, tmp, script):
        self.log = str(tmp / "requests.jsonl")
        path = tmp / "script.json"
        path.write_text(json.dumps(script))
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "replay_server.py"), "--script",
                                      str(path), "--log", self.log], stdout=subprocess.PIPE, text=True)
        self.url = "http://127.0.0.1:%d/v1" % int(self.proc.stdout.readline().split()[1])

    def requests(self):
        return [json.loads(line) for line in open(self.log)] if os.path.exists(self.log) else []

    def close(self):
        self.proc.kill()
        self.proc.wait()


def run_script(args, env_extra, timeout=1200):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANVIL_API_KEY", "OPENAI_API_KEY", "ANVIL_PRICE_INPUT", "ANVIL_PRICE_OUTPUT")}
    env.update(ANVIL_BIN=ANVIL, ANVIL_PYTHON=os.environ.get("ANVIL_PYTHON") or sys.executable, **env_extra)
    return subprocess.run(["bash", SCRIPT] + [str(a) for a in args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def files_holding(root, needle):
    """Every file under root whose bytes contain needle."""
    found = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p) and needle.encode() in open(p, "rb").read():
                found.append(os.path.relpath(p, root))
    return found


def md_row(md, first):
    """The line of a Markdown table whose first cell is `first` (the first such line)."""
    return next((line for line in md.splitlines() if line.startswith("| %s |" % first)), "")


def section(md, heading):
    at = md.find(heading)
    assert at >= 0, "no %r in the report:\n%s" % (heading, md)
    return md[at:]


def test_a_hosted_model_run_counts_exact_tokens_and_cost_and_the_key_stays_out(tmp_path):
    tasks = make_suite(str(tmp_path / "tasks"), {"level1/1_ChainSmall.py": (64, 256, "1.25"),
                                                 "level1/2_ChainWide.py": (32, 512, "2.0"),
                                                 "level2/1_Chain.py": (48, 256, "0.5")})
    skill = tmp_path / "skill.md"
    skill.write_text("You write kernels.\n")
    key = "sk-test-" + secrets.token_hex(16)
    server = Replay(tmp_path, {"model": "replay", "turns": TURNS})
    out = tmp_path / "run"
    try:
        proc = run_script([server.url, "replay", tasks, out, "--", "--concurrency", "3", "--max-tokens", "256",
                           "--skill", skill] + QUICK,
                          {"ANVIL_API_KEY": key, "ANVIL_PRICE_INPUT": "2.5", "ANVIL_PRICE_OUTPUT": "10"})
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The key went to the server as the requests' Authorization, and nowhere else: not in the
    # script's or anvil's output, not in any file of the run (settings, records, trajectories,
    # workdirs), though the model ran `env` and echoed the key's variables in the agent's shell.
    chats = [q for q in server.requests() if q["path"].endswith("/chat/completions")]
    assert len(chats) == 6 and all(q["authorization"] == "Bearer " + key for q in chats), chats
    assert key not in proc.stdout + proc.stderr
    assert files_holding(out, key) == []
    trajectories = sorted(glob.glob(str(out / "agent" / "**" / "trajectory.json"), recursive=True))
    assert len(trajectories) == 3
    shell = json.load(open(trajectories[0]))["messages"][3]
    assert shell["role"] == "tool" and "key=/" in shell["content"], shell

    res = json.load(open(out / "results.json"))
    assert res["schema"] == "anvil.bench/1"
    assert res["run"]["agent"] == {"endpoint": server.url, "model": "replay"}
    assert res["run"]["pricing"] == {"input_usd_per_mtok": 2.5, "output_usd_per_mtok": 10.0}
    for row in res["tasks"]:
        assert row["usage"] == {"turns": 2, "reported_turns": 2, "prompt_tokens": 4000, "completion_tokens": 1000}
        assert row["cost_usd"] == pytest.approx((4000 * 2.5 + 1000 * 10) / 1e6)  # 0.02
    levels = {l["level"]: l["metrics"]["usage"] for l in res["levels"]}
    assert levels["level1"] == {"episodes": 2, "turns": 4, "reported_turns": 4, "prompt_tokens": 8000,
                                "completion_tokens": 2000, "cost_usd": pytest.approx(0.04)}
    assert levels["level2"] == {"episodes": 1, "turns": 2, "reported_turns": 2, "prompt_tokens": 4000,
                                "completion_tokens": 1000, "cost_usd": pytest.approx(0.02)}
    assert res["overall"]["usage"] == {"episodes": 3, "turns": 6, "reported_turns": 6, "prompt_tokens": 12000,
                                       "completion_tokens": 3000, "cost_usd": pytest.approx(0.06)}

    md = open(out / "report.md").read()
    usage = section(md, "## Model usage")
    assert "| level | episodes | turns | turns reported | prompt tokens | completion tokens | cost (USD) |" in usage
    assert md_row(usage, "level1") == "| level1 | 2 | 4 | 4 | 8000 | 2000 | 0.0400 |"
    assert md_row(usage, "level2") == "| level2 | 1 | 2 | 2 | 4000 | 1000 | 0.0200 |"
    assert md_row(usage, "overall") == "| overall | 3 | 6 | 6 | 12000 | 3000 | 0.0600 |"
    assert "Prices: USD 2.5 per million prompt tokens, USD 10 per million completion tokens." in usage
    for first in ("level1 | 1", "level1 | 2", "level2 | 1"):
        assert "| 2 | 4000 | 1000 | 0.0200 |" in md_row(section(md, "## Tasks"), first)
    html = open(out / "report.html").read()
    assert "<b>15000</b><span>tokens (prompt + completion)</span>" in html
    assert "<b>$0.0600</b><span>cost (USD)</span>" in html
    assert "model usage: 6 turns (6 reported), 12000 prompt + 3000 completion tokens; cost $0.0600" in proc.stdout


def test_a_server_that_sends_no_usage_is_not_reported_never_zero(tmp_path):
    tasks = make_suite(str(tmp_path / "tasks"), {"level1/1_ChainSmall.py": (64, 256, "1.25")})
    server = Replay(tmp_path, {"model": "replay", "turns": [{k: v for k, v in t.items() if k != "usage"}
                                                           for t in TURNS], "usage": False})
    out = tmp_path / "run"
    try:
        proc = run_script([server.url, "replay", tasks, out, "--", "--max-tokens", "256"] + QUICK,
                          {"OPENAI_API_KEY": "sk-other-" + secrets.token_hex(8), "ANVIL_PRICE_INPUT": "3",
                           "ANVIL_PRICE_OUTPUT": "15"})
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.load(open(out / "results.json"))
    row = res["tasks"][0]
    assert row["usage"] == {"turns": 2, "reported_turns": 0, "prompt_tokens": None, "completion_tokens": None}
    assert row["cost_usd"] is None
    assert res["overall"]["usage"] == {"episodes": 1, "turns": 2, "reported_turns": 0, "prompt_tokens": None,
                                       "completion_tokens": None, "cost_usd": None}
    md = open(out / "report.md").read()
    assert md_row(section(md, "## Model usage"), "overall") == \
        "| overall | 1 | 2 | 0 | not reported | not reported | not reported |"
    assert "| 2 | not reported | not reported | not reported |" in md_row(section(md, "## Tasks"), "level1 | 1")
    assert "tokens not reported by the server" in proc.stdout


def test_the_script_refuses_without_a_key_and_names_a_leak_without_printing_the_key(tmp_path):
    tasks = os.path.join(ROOT, "examples", "tasks")
    proc = run_script(["http://127.0.0.1:9/v1", "m", tasks, tmp_path / "none"], {})
    assert proc.returncode == 2
    assert "no API key: set ANVIL_API_KEY OPENAI_API_KEY in the environment" in proc.stderr
    assert not (tmp_path / "none").exists()
    proc = run_script(["http://127.0.0.1:9/v1", "m", tasks, tmp_path / "none", "--", "--api-key-env", "MY_KEY"],
                      {"ANVIL_API_KEY": "sk-not-this-one"})
    assert proc.returncode == 2 and "no API key: set MY_KEY" in proc.stderr, proc.stderr
    # A run directory holding the key (planted here): the check after anvil names the file, not the
    # key. anvil itself refuses the negative price by name before reaching the endpoint.
    key = "sk-planted-" + secrets.token_hex(12)
    out = tmp_path / "run"
    (out / "agent").mkdir(parents=True)
    (out / "agent" / "notes.txt").write_text("the key is " + key + "\n")
    proc = run_script(["http://127.0.0.1:9/v1", "m", tasks, out], {"ANVIL_API_KEY": key, "ANVIL_PRICE_INPUT": "-1",
                                                                   "ANVIL_PRICE_OUTPUT": "1"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "anvil bench: --price-input -1: a price cannot be negative" in proc.stderr
    assert "the API key ($ANVIL_API_KEY) is in the run directory, in:" in proc.stderr
    assert str(out / "agent" / "notes.txt") in proc.stderr
    assert key not in proc.stdout + proc.stderr


def test_the_local_model_s_tokens_are_counted(tmp_path):
    """Gemma 3 270M on llama.cpp, through the script with ENDPOINT `local`: the tokens its server
    counted are in the results, non-zero, and each task's are its trajectory's counters; no prices,
    no cost."""
    local_gguf()  # skips (ANVIL_SKIP_LOCAL_MODEL) or fails as the other local-model tests do
    tasks = make_suite(str(tmp_path / "tasks"), {"level1/1_ChainSmall.py": (64, 256, "1.25"),
                                                 "level1/2_ChainWide.py": (32, 512, "2.0")})
    skill = tmp_path / "skill.md"
    skill.write_text("You write CPU kernels for PyTorch models. Use the tools; call finish when done.\n")
    out = tmp_path / "run"
    proc = run_script(["local", "", tasks, out, "--", "--max-turns", "2", "--max-tokens", "48", "--temperature", "0",
                       "--sample-seed", "1", "--concurrency", "1", "--local-context", "4096", "--skill", skill]
                      + QUICK, {}, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.load(open(out / "results.json"))
    assert res["run"]["pricing"] is None
    prompt = completion = 0
    for row in res["tasks"]:
        traj = json.load(open(out / row["episode"] / "trajectory.json"))
        c = traj["counters"]
        u = row["usage"]
        assert u["turns"] == c["turns"] >= 1 and u["reported_turns"] == c["turns"], (u, c)
        assert u["prompt_tokens"] == c["prompt_tokens"] > 0 and u["completion_tokens"] == c["completion_tokens"] > 0
        assert u["prompt_tokens"] == sum(t["usage"]["prompt_tokens"] for t in traj["turns"])
        assert row["cost_usd"] is None
        prompt += u["prompt_tokens"]
        completion += u["completion_tokens"]
    total = res["overall"]["usage"]
    assert (total["episodes"], total["prompt_tokens"], total["completion_tokens"]) == (2, prompt, completion)
    assert total["cost_usd"] is None
    md = open(out / "report.md").read()
    assert md_row(section(md, "## Model usage"), "overall").endswith("| %d | %d |" % (prompt, completion))
    assert "cost (USD)" not in md
    assert "**prices**: none given (--price-input, --price-output): no cost" in md
