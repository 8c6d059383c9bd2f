"""`anvil rft` on 1,000 recorded episodes: the bar is 10 s on a 2-core machine (issue 19).

Makes a run directory of realistic token-level records (30 turns, a few hundred sampled ids with
their log-probabilities each, tool outputs of a few KB, the opening prompt of SKILL.md and the task;
written as anvil writes them: JSON with a one-space indent), with some of every drop reason and a few
chat-mode records, then times `anvil rft` over it (3 runs, the median) and writes
bench/results/rft-<date>.md. The records are kept in --dir and reused while their parameters match.

    python3 bench/rft_bench.py [--episodes 1000] [--turns 30] [--dir /tmp/anvil-rft-bench] [--runs 3]
"""
import argparse
import datetime
import hashlib
import json
import multiprocessing
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANVIL = os.environ.get("ANVIL_BIN", os.path.join(ROOT, "build", "anvil"))
GENERATOR = 1  # bump when the records change: a kept corpus is then made again

# Of every 100 episodes: what each is (its expected fate in `anvil rft`).
MIX = [("keep", 60), ("low_reward", 12), ("not_finished", 5), ("hack_suspected", 4), ("malformed", 5),
       ("redundant_loop", 4), ("stalled_compiles", 3), ("token_seam", 3), ("duplicate", 3), ("chat", 1)]
REASONS = ["not_finished", "low_reward", "hack_suspected", "malformed", "redundant_loop", "stalled_compiles",
           "token_seam", "duplicate"]
WORDS = ("the kernel reads each row once and writes the fused result, the block size is 256 threads and the "
         "grid covers every row; shared memory holds the partial sums until the warp reduction ends").split()
COMPILE_ERROR = ("compile failed (compile_error):\nkernels/k.cu(41): error: identifier \"blockDim_x\" is undefined\n"
                 "1 error detected in the compilation of \"kernels/k.cu\".\n")


def text(rng, chars):
    out, n = [], 0
    while n < chars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def ids(rng, n):
    return [rng.randrange(151000) for _ in range(n)]


def plan(k, turns, n):
    """The k-th turn's call (name, arguments), the n-th variant so no two calls repeat."""
    if k == 0:
        return "read_file", {"path": "model.py"}
    if k == turns - 1:
        return "finish", {"summary": "fused kernel, %d variants tried" % n}
    cycle = [("write_file", {"path": "kernels/k%d.cu" % k, "content": None}), ("compile", {}), ("verify", {}),
             ("edit_file", {"path": "kernels/k%d.cu" % (k - 3), "old": "v%d" % k, "new": "w%d" % k}), ("compile", {}),
             ("profile", {}), ("bash", {"command": "nvcc --version; ls kernels # %d" % k}),
             ("read_file", {"path": "kernels/k%d.cu" % (k - 7)})]
    return cycle[(k - 1) % len(cycle)]


def answer(name, kind, rng, k):
    """What the tool answered, its turn record's ok and detail."""
    if name == "compile":
        if kind == "stalled_compiles":
            return COMPILE_ERROR, False, {"ok": False, "units": 2, "compiled": 1, "seconds": 3.1}
        return "compiled: 2 units (1 compiled, the rest cached), fast mode, for cuda sm_90a", True, \
            {"ok": True, "units": 2, "compiled": 1, "seconds": 3.1}
    if name in ("verify", "profile"):
        if kind == "stalled_compiles":
            return "FAILED: compile_error (reward -1)\n" + COMPILE_ERROR.split("\n", 1)[1], True, \
                {"outcome": "compile_error", "reward": -1}
        if kind == "hack_suspected" and k == 11:
            return "FAILED: hack_suspected (reward -1)\nthe output aliases an input\n", True, \
                {"outcome": "hack_suspected", "reward": -1}
        return "CORRECT: passed 5 of 5 checks on fresh random inputs (seed 7, tolerance preset strict)\n" + \
            text(rng, rng.randint(300, 900)), True, {"outcome": "ok", "reward": 2, "candidate_ms": 0.41}
    return text(rng, rng.randint(1000, 4000)), True, None


def make_record(i, kind, turns, seed):
    """One episode's record, shaped as src/anvil/agent/episode.cpp writes it."""
    rng = random.Random(seed)  # a duplicate shares its partner's seed: the same sampled ids
    side = random.Random(i)
    task = "task_%04d" % (seed if kind == "duplicate" else i)
    tokens = kind != "chat"
    messages = [{"role": "system", "content": text(rng, 9000)}, {"role": "user", "content": text(rng, 2500)}]
    rec = {"schema": "anvil.trajectory/1", "id": task + "/sample-%d" % (1 if kind == "duplicate" else 0),
           "status": "finished", "end_reason": "finish",
           "task": {"spec": "tasks/%s.py" % task, "name": task, "hash": hashlib.sha256(task.encode()).hexdigest(), "meta": {}},
           "model": {"base_url": "http://127.0.0.1:8000/v1", "model": "policy"},
           "sampling": {"temperature": 1.0, "max_tokens": 8192, "logprobs": True, "return_token_ids": True},
           "limits": {"max_turns": 200, "max_context": 131072, "wall_clock_s": 10800, "max_tool_output": 12000},
           "workdir": "/runs/x/%s/sample-0/workdir" % task, "skill": "share/agent/SKILL.md", "protocol": "cuda-agent",
           "tool_results_as_user": False, "token_level": tokens,
           "tools": [{"type": "function", "function": {"name": n, "description": text(side, 200), "parameters": {
               "type": "object", "properties": {"path": {"type": "string"}}}}}
                     for n in ("read_file", "write_file", "edit_file", "bash", "compile", "verify", "profile", "finish")],
           "messages": messages, "turns": [], "context": {"shortened": {}, "shortened_chars": 0},
           "counters": {"turns": turns, "tool_calls": turns, "tool_errors": 0, "malformed": {}, "malformed_total": 0,
                        "context_overflows": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0},
           "state": {"todos": []}, "started_at": "2026-12-01T10:00:00Z", "ended_at": "2026-12-01T10:40:00Z",
           "seconds": 2400.0, "resumes": [], "reward": 2}
    if tokens:
        rec["tokenizer"] = {"probe": [], "probe_ids": [1, 2, 3], "sha256": "b" * 64}
    length = 0
    for k in range(turns):
        name, args = plan(k, turns, i)
        if kind == "redundant_loop" and k in (5, 6, 7):
            name, args = "read_file", {"path": "model.py"}
        if args.get("content", 0) is None:
            args = dict(args, content=text(rng, 2500))
        sampled = ids(rng, rng.randint(200, 400))
        content = text(rng, 200)
        call = {"id": "call_%d_0" % k, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        out, ok, detail = answer(name, kind, side, k)
        mi = len(messages)
        messages.append({"role": "assistant", "content": content, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": out})
        turn = {"index": k, "started_at": "2026-12-01T10:%02d:00Z" % k, "message_index": mi,
                "finish_reason": "tool_calls", "usage": {"prompt_tokens": length, "completion_tokens": len(sampled)},
                "attempts": 1, "retry_log": [], "seconds": {"model": 4.2, "tools": 1.1, "turn": 5.3},
                "tool_calls": [dict({"id": call["id"], "name": name, "ok": ok, "seconds": 1.1,
                                     "output_chars": len(out)}, **({"detail": detail} if detail else {}))],
                "malformed": []}
        if kind == "malformed" and k == 9:
            turn["malformed"].append({"kind": "bad_json", "id": call["id"], "name": name})
            rec["counters"]["malformed"] = {"bad_json": 1}
            rec["counters"]["malformed_total"] = 1
        if tokens:
            added = ids(side, 2600 if k == 0 else max(20, len(messages[mi - 1]["content"]) // 4))
            prefix = length - 1 if kind == "token_seam" and k == 10 else length
            turn.update({"token_ids": sampled, "prompt_token_ids": {"prefix": prefix, "ids": added},
                         "prompt_kind": "opening" if k == 0 else "tool",
                         "logprobs": [{"token": "t%d" % t, "logprob": -round(rng.random() * 3, 6), "token_id": t}
                                      for t in sampled]})
            length += len(added) + len(sampled)
        rec["turns"].append(turn)
    rec["finish_summary"] = "fused kernel"
    if kind == "not_finished":
        rec.update(status="running", end_reason=None, reward=None, evaluation=None)
        del rec["ended_at"]
    elif kind == "low_reward":
        rec.update(reward=-1, evaluation={"outcome": "wrong_answer", "reward": -1})
    else:
        rec["evaluation"] = {"outcome": "ok", "reward": 2}
    return rec


def kinds(episodes):
    """Every episode's kind, shuffled (a fixed seed); a duplicate names the keep it copies."""
    out = []
    for kind, per100 in MIX:
        out += [kind] * (episodes * per100 // 100)
    out += ["keep"] * (episodes - len(out))
    random.Random(19).shuffle(out)
    keeps = [i for i, k in enumerate(out) if k == "keep"]
    return [(k, keeps[i % len(keeps)] if k == "duplicate" else i) for i, k in enumerate(out)]


def write_one(job):
    i, kind, seed, turns, run = job
    rec = make_record(i, kind, turns, seed)
    path = os.path.join(run, rec["id"].replace("/", os.sep), "trajectory.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
    return os.path.getsize(path)


def corpus(directory, episodes, turns):
    """The run directory of the records, made unless a matching one is kept; (its path, bytes)."""
    run = os.path.join(directory, "run")
    manifest = os.path.join(directory, "manifest.json")
    want = {"generator": GENERATOR, "episodes": episodes, "turns": turns}
    if os.path.exists(manifest) and json.load(open(manifest)).get("params") == want:
        return run, json.load(open(manifest))["bytes"], 0.0
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(run)
    t0 = time.time()
    jobs = [(i, kind, seed, turns, run) for i, (kind, seed) in enumerate(kinds(episodes))]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        size = sum(pool.map(write_one, jobs, chunksize=8))
    json.dump({"params": want, "bytes": size}, open(manifest, "w"))
    return run, size, time.time() - t0


def timed_rft(run, out):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([ANVIL, "rft", run, "--out", out, "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("anvil rft failed (exit %d): %s" % (p.returncode, p.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024, json.loads(p.stdout)


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def report(a, size, gen_s, runs, summary, out_bytes, load):
    walls = [r[0] for r in runs]
    median = statistics.median(walls)
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# `anvil rft` on %d recorded episodes" % a.episodes, "",
        "bench/rft_bench.py: %d token-level records (%d turns each: 200-400 sampled ids with log-probabilities, "
        "a tool output of 1-4 KB, the prompt ids it adds; SKILL.md-sized opening) with some of every drop reason "
        "and %d%% chat-mode, in a run directory as `anvil agent --out` writes it (one-space indented JSON), "
        "through `anvil rft RUN --out OUT --json` (parsing on every core)." % (a.episodes, a.turns, dict(MIX)["chat"]),
        "", "| | |", "|---|---|",
        "| date | %s |" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "| machine | %d cores (nproc), %s; load average %.2f when the runs began |" % (
            os.cpu_count(), cpu_model(), load),
        "| anvil | %s%s |" % (rev or "unknown", " + uncommitted changes" if dirty else ""),
        "| records | %d files, %.0f MB (%.2f MB each) |" % (a.episodes, size / 1e6, size / 1e6 / a.episodes),
        "| output | %.0f MB of JSON lines, %d examples |" % (out_bytes / 1e6, summary["kept"]),
        "| tokens written | %d in all, %d sampled (under the loss) |" % (summary["tokens"]["total"], summary["tokens"]["model"]),
        "| runs (wall) | %s |" % ", ".join("%.2f s" % w for w in walls),
        "| **median** | **%.2f s** (bar: 10 s): %.0f episodes/s, %.0f MB/s read |" % (median, a.episodes / median, size / 1e6 / median),
        "| CPU time (median run) | %.2f s user+sys (%.1f cores busy) |" % (
            statistics.median(r[1] for r in runs), statistics.median(r[1] for r in runs) / median),
        "| peak memory | %.0f MB (max RSS) |" % max(r[2] for r in runs),
        "", "Counts (`anvil rft`'s summary):", "",
        "| kept | no_tokens | " + " | ".join(REASONS) + " |",
        "|---" * (2 + len(REASONS)) + "|",
        "| %d | %d | " % (summary["kept"], summary["no_tokens"]) + " | ".join(str(summary["dropped"][r]) for r in REASONS) + " |",
        "",
    ]
    if load > 1:
        lines.append("The machine was shared (load average %.2f over %d cores): the wall times include waiting for "
                     "a core; the CPU time is anvil rft's own, every thread's." % (load, os.cpu_count()))
    if gen_s:
        lines.append("Making the records took %.0f s (Python, not timed above)." % gen_s)
    return "\n".join(lines) + "\n", median


def expected(episodes):
    """What the summary must say of the corpus (the bench checks it measured the real work)."""
    counts = {}
    for kind, _ in kinds(episodes):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/anvil-rft-bench")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    run, size, gen_s = corpus(a.dir, a.episodes, a.turns)
    out = os.path.join(a.dir, "sft.jsonl")
    load = os.getloadavg()[0]
    runs = [timed_rft(run, out) for _ in range(a.runs)]
    summary = runs[-1][3]
    want = expected(a.episodes)
    got = dict(summary["dropped"], keep=summary["kept"] - summary["no_tokens"], chat=summary["no_tokens"])
    for kind, n in want.items():
        assert got.get(kind) == n, "expected %d %s, anvil rft says %s" % (n, kind, got.get(kind))
    text_, median = report(a, size, gen_s, runs, summary, os.path.getsize(out), load)
    os.makedirs(a.results, exist_ok=True)
    path = os.path.join(a.results, "rft-%s.md" % datetime.date.today().isoformat())
    with open(path, "w") as f:
        f.write(text_)
    print(text_)
    print("written: " + path)
    return 0 if median <= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
