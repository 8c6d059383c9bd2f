"""The anvil program's command line as a new user meets it (issue 23): an unknown or missing
command is named with the closest one, and --help shows flags without CLI11's `{false}`."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")


def anvil(*args):
    return subprocess.run([ANVIL, *args], capture_output=True, text=True, timeout=60)


def test_an_unknown_command_is_named_with_the_closest():
    r = anvil("evl", "--task", "x.py")
    assert r.returncode == 2
    assert "unknown command 'evl' for anvil (did you mean 'eval'?)" in r.stderr, r.stderr
    assert "init, build" in r.stderr
    r = anvil("frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr and "did you mean" not in r.stderr
    r = anvil("task", "shw")
    assert r.returncode == 2 and "for anvil task (did you mean 'show'?)" in r.stderr, r.stderr


def test_a_missing_command_lists_the_commands():
    r = anvil("cache")
    assert r.returncode == 2 and "anvil cache needs a command: stats, clear" in r.stderr, r.stderr
    assert anvil("--version").returncode == 0


def test_help_shows_no_flag_defaults():
    for args in (("init",), ("task", "show"), ("bench",)):
        r = anvil(*args, "--help")
        assert r.returncode == 0, r.stderr
        assert "{false}" not in r.stdout and "{true}" not in r.stdout, r.stdout
    assert "--no-check" in anvil("init", "--help").stdout


def test_evals_exit_status_says_whose_fault(tmp_path):
    """0: the candidate was judged (whatever its outcome); 1: the task is at fault; 2: anvil could
    not evaluate (a path that does not exist is usage, the task's as the candidate's)."""
    candidate = os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")
    r = anvil("eval", "--task", str(tmp_path / "missing.py"), "--candidate", candidate)
    assert r.returncode == 2 and "does not exist" in r.stderr, (r.returncode, r.stderr)
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no such op')\n")
    r = anvil("eval", "--device", "cpu", "--compile-mode", "none", "--task", str(broken), "--candidate", candidate)
    assert r.returncode == 1 and "task_error" in r.stdout, (r.returncode, r.stdout, r.stderr)
    # a judged candidate's failure exits 0: test_eval_schema.test_results_match_the_schema


def test_baselines_command_lines_and_exit_status(tmp_path):
    """`anvil baselines DIR`: one line per task in natural order and a summary; a broken task is its
    task_error (exit 1), a second run finds the rest cached, a missing target is usage (exit 2)."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    src = open(os.path.join(ROOT, "examples", "tasks", "02_softmax.py")).read()
    (tasks / "10_softmax.py").write_text(src)
    (tasks / "2_broken.py").write_text("import torch\nraise RuntimeError('no such op')\n")
    args = ("baselines", "--device", "cpu", "--compile-mode", "none", "--calls", "3", "--warmup", "1",
            "--input-sets", "1", "--seed", "5", str(tasks))
    env = dict(os.environ, ANVIL_CACHE=str(tmp_path / "cache"))
    run = lambda: subprocess.run([ANVIL, *args], capture_output=True, text=True, timeout=600, env=env)  # noqa: E731
    r = run()
    lines = r.stdout.splitlines()
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert lines[0].startswith("2_broken.py  task_error"), r.stdout
    assert "RuntimeError: no such op" in r.stdout and str(tasks / "2_broken.py") in r.stdout
    first = [l for l in lines if l.startswith("10_softmax.py  ")]
    assert first and ("measured" in first[0] or "not_kept" in first[0]), r.stdout
    assert lines[-1].startswith("baselines of 2 task(s) on cpu: "), r.stdout
    if "measured" in first[0]:  # kept: the next run measures nothing
        again = run()
        assert any(l.startswith("10_softmax.py  cached  eager ") for l in again.stdout.splitlines()), again.stdout
    r = subprocess.run([ANVIL, "baselines", str(tmp_path / "nothing")], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "nothing does not exist" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_baselines_warm_the_compile_caches_first_largest_first(tmp_path):
    """`anvil baselines --jobs 2`: torch.compile's caches of the tasks still to measure are warmed
    first, two at a time, the largest task file first (docs/baselines.md); the document says so."""
    import json

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    src = open(os.path.join(ROOT, "examples", "tasks", "02_softmax.py")).read()
    (tasks / "1_small.py").write_text(src)
    (tasks / "2_large.py").write_text(src + "\n# " + "x" * 4096 + "\n")
    env = dict(os.environ, ANVIL_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([ANVIL, "baselines", "--device", "cpu", "--jobs", "2", "--calls", "3", "--warmup", "1",
                        "--input-sets", "1", "--seed", "5", "--json", str(tasks)],
                       capture_output=True, text=True, timeout=900, env=env)
    doc = json.loads(r.stdout)
    warm = doc["warm"]
    assert warm["jobs"] == 2 and warm["tasks"] == 2 and not warm["failed"], warm
    assert [os.path.basename(w["spec"]) for w in warm["windows"]] == ["2_large.py", "1_small.py"], warm
    assert all(0 <= w["started_s"] <= w["ended_s"] for w in warm["windows"]), warm
    assert doc["summary"]["tasks"] == 2 and doc["summary"]["task_errors"] == 0, doc["summary"]


def test_gpus_take_a_comma_list_in_every_command(tmp_path):
    """`--gpus 0,1` (issue 24: `anvil bench --gpus 0,1` was refused, "Could not convert") is read
    by bench, agent and serve alike; a negative index is refused by name."""
    missing = str(tmp_path / "missing")
    for args in (("bench", "--tasks", missing, "--solutions", missing, "--out", str(tmp_path / "run")),
                 ("agent", "--task", missing + ".py", "--out", str(tmp_path / "agent")),
                 ("serve", "--state", "/dev/null/state", "--port", "0")):
        r = anvil(*args, "--gpus", "0,1")
        assert "Could not convert" not in r.stderr and "--gpus" not in r.stderr, (args[0], r.stderr)
        assert r.returncode != 0  # each stops at what follows: the missing tasks, a state that cannot be made
        r = anvil(*args, "--gpus", "0,-1")
        assert r.returncode == 2 and "--gpus: Value -1 not in range 0 to 255" in r.stderr, (args[0], r.stderr)


def test_build_takes_a_single_file_candidate(tmp_path):
    """`anvil build model_new.py` builds a KernelBench file's load_inline modules ahead (read, never run):
    a file with none builds nothing and says what it skipped; a file that is not a candidate is named."""
    env = dict(os.environ, ANVIL_CACHE=str(tmp_path / "cache"))
    plain = tmp_path / "model_new.py"
    plain.write_text("import torch\nfrom torch.utils.cpp_extension import load_inline\n"
                     "mod = load_inline(name=make_name(), cpp_sources='', functions=['f'])\n"
                     "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    r = subprocess.run([ANVIL, "build", "--json", str(plain)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] and report["mode"] == "load_inline" and not report["units"], report
    assert any("not built ahead: line 3" in w for w in report["warnings"]), report
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    r = subprocess.run([ANVIL, "build", str(other)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "not a single-file candidate" in r.stderr, r.stdout + r.stderr
