"""A scripted agent episode end to end, through the real `anvil agent` binary.

The replay server (tests/replay_server.py, real HTTP) plays a model whose first turn profiles the
reference (profile_reference, when offered) and reads the task, then writes a bundled candidate's
files into the workdir with write_file, then calls compile, verify, profile, tune (when the
candidate's ModelNew sets self.config: --tune's values), ncu_profile of the reference and of
ModelNew (when offered) and finish; anvil runs every tool for real and judges the final workdir
afresh. Prints one line per turn (tool, ok, first line of the answer; profile_reference, profile,
tune and ncu_profile in full) and the final evaluation, and writes the trajectory and a summary to
--out.

    python3 bench/agent_scripted.py --task examples/tasks/01_elementwise_chain.py \
        --candidate examples/candidates/01_elementwise_chain/cuda --out /tmp/agent-gpu
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(name, args):
    return {"name": name, "arguments": args}


def script_for(candidate, with_ncu, tune):
    files = []
    for base, dirs, names in os.walk(candidate):
        dirs[:] = [d for d in dirs if d not in ("build", "__pycache__")]
        for n in sorted(names):
            path = os.path.join(base, n)
            rel = os.path.relpath(path, candidate)
            if rel == "model_new.py" or n.endswith((".cu", ".cuh", ".cpp", ".h", ".hpp")):
                files.append((rel, open(path).read()))
    tuned = "self.config" in dict(files).get("model_new.py", "")
    turns = [
        {"content": "Profiling the reference first.",
         "tool_calls": [call("profile_reference", {}), call("read_file", {"path": "model.py"}),
                        call("bash", {"command": "nvcc --version | tail -1; nvidia-smi -L; ls; \"${ANVIL_PYTHON:-python3}\" -c "
                                      "'import torch; print(\"torch sees the GPU:\", torch.cuda.is_available())'"}),
                        call("todo_write", {"todos": [{"content": "fused kernel", "status": "in_progress"}]})]},
        {"content": None, "tool_calls": [call("write_file", {"path": p, "content": c}) for p, c in files]},
        {"content": None, "tool_calls": [call("compile", {})]},
        {"content": None, "tool_calls": [call("verify", {})]},
        {"content": None, "tool_calls": [call("profile", {})]},
    ]
    if tuned and tune:
        turns.append({"content": None, "tool_calls": [call("tune", {"configs": tune})]})
    if with_ncu:
        turns.append({"content": None, "tool_calls": [call("ncu_profile", {"top": 3, "target": "reference"}),
                                                      call("ncu_profile", {"top": 3})]})
    turns.append({"content": "Done.", "tool_calls": [call("finish", {"summary": "bundled candidate"})]})
    return {"model": "replay", "turns": turns}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--anvil", default=os.environ.get("ANVIL_BIN", os.path.join(ROOT, "build", "anvil")))
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--tune", default="0,1,2,3,4,5,6,7",
                    help="the launch configurations tune tries when ModelNew sets self.config (comma-separated; "
                         "empty: no tune call)")
    ap.add_argument("extra", nargs="*", help="more `anvil agent` options (after --)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    script = os.path.join(a.out, "script.json")
    with open(script, "w") as f:
        json.dump(script_for(a.candidate, not a.no_ncu, [int(v) for v in a.tune.split(",") if v.strip()]), f)
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "replay_server.py"), "--script", script,
                               "--port", "0", "--log", os.path.join(a.out, "requests.jsonl")],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        run = os.path.join(a.out, "run")
        cmd = [a.anvil, "agent", "--task", a.task, "--endpoint", "http://127.0.0.1:%d/v1" % port, "--model", "replay",
               "--out", run] + (["--no-ncu"] if a.no_ncu else []) + a.extra
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
    finally:
        server.kill()
    print(p.stderr[-3000:], end="")
    print(p.stdout, end="")
    trajs = [os.path.join(b, "trajectory.json") for b, _, n in os.walk(run) if "trajectory.json" in n]
    if p.returncode != 0 or not trajs:
        print("anvil agent failed (exit %d)" % p.returncode)
        return 1
    rec = json.load(open(trajs[0]))
    with open(os.path.join(a.out, "trajectory.json"), "w") as f:
        json.dump(rec, f, indent=1)
    msgs = rec["messages"]
    names = {}
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            names[tc["id"]] = tc["function"]["name"]
    print("\nturn-by-turn (tool: first lines of its answer):")
    for m in msgs:
        if m["role"] == "tool":
            name = names.get(m["tool_call_id"], "?")
            text = (m["content"] or "").strip().splitlines()
            if name in ("profile_reference", "profile", "tune", "ncu_profile"):  # these in full
                print("  %-17s %s" % (name, ("\n" + " " * 20).join(text)))
            else:
                print("  %-17s %s" % (name, " | ".join(text[:3])[:200]))
    first = [names.get(m.get("tool_call_id")) for m in msgs if m["role"] == "tool"][:1]
    first_text = next((m["content"] for m in msgs if m["role"] == "tool"), "")
    ev = rec.get("evaluation") or {}
    t = ev.get("timing") or {}
    summary = {"task": rec["task"]["name"], "candidate": a.candidate, "end_reason": rec["end_reason"],
               "status": rec["status"], "turns": len(rec["turns"]), "reward": rec.get("reward"),
               "outcome": ev.get("outcome"), "candidate_ms": t.get("candidate_ms"), "eager_ms": t.get("eager_ms"),
               "compile_ms": t.get("compile_ms"), "speedup_eager": t.get("speedup_eager"),
               "speedup_compile": t.get("speedup_compile"), "episode_seconds": rec.get("seconds"),
               "wall_seconds": wall, "env": ev.get("env"), "tools_offered": [s["function"]["name"] for s in rec["tools"]],
               "first_tool": first[0] if first else None,
               "first_turn_saw_reference_profile": (first_text or "").startswith("The reference (model.py's Model)")}
    fmt = lambda v, f: f % v if isinstance(v, (int, float)) else "-"
    print("\nfinal evaluation (fresh, in the protected harness): %s, reward %s; candidate %s ms, eager %s ms (%s), "
          "torch.compile %s ms (%s); %d turns, episode %.0f s" % (
              summary["outcome"], summary["reward"], fmt(summary["candidate_ms"], "%.4f"),
              fmt(summary["eager_ms"], "%.4f"), fmt(summary["speedup_eager"], "%.2fx"),
              fmt(summary["compile_ms"], "%.4f"), fmt(summary["speedup_compile"], "%.2fx"), summary["turns"],
              summary["episode_seconds"] or 0))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0 if rec["status"] == "finished" and (rec.get("reward") or -1) >= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
