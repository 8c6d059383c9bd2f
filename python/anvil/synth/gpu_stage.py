"""python -m anvil.synth.gpu_stage TASKS.parquet|TASKS.jsonl --out DIR: anvil synth's GPU stage, the tasks
at full size on a GPU, each a verdict with its reason:

| reason | rejected when |
|---|---|
| gpu_eager | the model fails, or its output holds NaN or Inf at full size |
| gpu_deterministic | three calls (the model twice, a second model and inputs made under the same seeds once, the random generator moved between) are not bitwise equal |
| gpu_compile | torch.compile (inductor) fails, or its output differs from eager's beyond 1e-2 |
| gpu_runtime | the eager runtime (CUDA events, median) is outside the paper's 1-100 ms |
| gpu_timeout | its checks take over 120 s (--task-timeout): its process is killed, a new one takes its place |
| gpu_error | anything else the task raises, or its process dies |

`anvil synth --gpu` runs it over the tasks its CPU stage accepted (docs/synth.md); bench/gpu_synth_check.sh
runs it alone, with `anvil vet` and a determinism audit on a seeded sample (--vet-sample).

Processes compile in parallel (inductor's code generation is the slow part) and time holding an
exclusive lock, one at a time, so no compile or launch of another process runs beside a measurement;
the timed calls are bounded (a call far over the window is its verdict, at once), so no task holds
the lock for long. Each process may hold its share of the GPU's memory
(torch.cuda.set_per_process_memory_fraction): a task that runs out of it is tried again, after the
others, by one process with the whole GPU, so the stage's own parallelism rejects nothing.

DIR/gpu.jsonl is the journal, a record a line as soon as it is final; a second run over the same
DIR takes only tasks it has no verdict for (matched by index and the sha256 of the code).
DIR/gpu-summary.json is the counts. --budget-s stops taking tasks once that long has passed (what is
done is kept).
"""
import argparse
import collections
import fcntl
import hashlib
import json
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import random
import statistics
import sys
import tempfile
import time

from anvil.synth.compose import WINDOW_MS  # one home for the paper's window
from anvil.synth.filters import load_module, outputs

WARMUP, CALLS = 3, 10
TIMED_MS = 1500  # the timed calls of one model take about this at most
COMPILE_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}
SHARE_OF_GPU = 0.9  # of the GPU's memory, over the processes (one process alone: all of it)
TASK_TIMEOUT_S = 120  # one task's checks at most; past it, its process is killed and a new one started


def code_sha(code):
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


class Verdict(Exception):
    def __init__(self, reason, detail=""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def _sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time(fn, args, torch, device):
    """The median milliseconds of a call: one call first, then as many as fit TIMED_MS (3-CALLS).
    A first call over 3x the window's top is the answer as it is."""
    cuda = device == "cuda"

    def once():
        if not cuda:  # the CPU (a test of this script): wall time
            t = time.perf_counter()
            fn(*args)
            return (time.perf_counter() - t) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    first = once()
    if first > 3 * WINDOW_MS[1]:
        return first
    for _ in range(WARMUP - 1):
        once()
    calls = max(3, min(CALLS, int(TIMED_MS / max(first, 1e-3))))
    return statistics.median(once() for _ in range(calls))


def _instance(module, torch, device, reseed=None):
    """Model and inputs made on the device under the seeds the CPU stage uses (filters.instance)."""
    with torch.device(device):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs()).eval().to(device)
        torch.manual_seed(1)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    if reseed is not None:
        torch.manual_seed(reseed)
    return model, inputs


def _max_diff(a, b):
    return float((a.double() - b.double()).abs().max()) if a.shape == b.shape else float("inf")


def _bitwise(outs, again, torch, what):
    if len(outs) != len(again) or not all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(outs, again)):
        diff = max((_max_diff(a, b) for a, b in zip(outs, again)), default=float("inf"))
        raise Verdict("gpu_deterministic", "%s differs from the first call (max |diff| %.3g)" % (what, diff))


def _check(row, rec, lock_path, torch, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    module = load_module(row["code"], "gpu_%d" % row["index"])
    with torch.no_grad():
        try:
            model, inputs = _instance(module, torch, device, reseed=2)
            eager = outputs(model(*inputs), torch)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - the task's failure is its verdict
            raise Verdict("gpu_eager", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""))
        if not all(bool(torch.isfinite(t).all()) for t in eager):
            raise Verdict("gpu_eager", "NaN or Inf at full size")
        torch.manual_seed(0x5EED)
        _bitwise(eager, outputs(model(*inputs), torch), torch, "a second call")
        try:
            compiled = torch.compile(model)
            tc = time.perf_counter()
            got = outputs(compiled(*inputs), torch)
            rec["compile_s"] = round(time.perf_counter() - tc, 2)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001
            raise Verdict("gpu_compile", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""))
        diff = max(_max_diff(a, b) for a, b in zip(got, eager))
        rec["compile_max_abs_diff"] = diff if math.isfinite(diff) else None  # a journal line is strict JSON
        if len(got) != len(eager) or not all(a.shape == b.shape and torch.allclose(a, b, **COMPILE_TOLERANCE)
                                             for a, b in zip(got, eager)):
            raise Verdict("gpu_compile", "torch.compile's output differs from eager's by %.3g" % diff)
        del got
        _sync(torch)
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                rec["eager_ms"] = _time(model, inputs, torch, device)
                if WINDOW_MS[0] <= rec["eager_ms"] <= WINDOW_MS[1]:
                    rec["compile_ms"] = _time(compiled, inputs, torch, device)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        rec["measured_over_estimate"] = rec["eager_ms"] / row["estimate_ms"]
        if not WINDOW_MS[0] <= rec["eager_ms"] <= WINDOW_MS[1]:
            raise Verdict("gpu_runtime", "eager %.3g ms, outside %g-%g ms" % (rec["eager_ms"], *WINDOW_MS))
        del compiled, model, inputs
        torch._dynamo.reset()
        model2, inputs2 = _instance(module, torch, device, reseed=0xF00D)
        _bitwise(eager, outputs(model2(*inputs2), torch), torch, "a second model's call")


def check(row, lock_path, torch, device="cuda"):
    """The task's GPU verdict: status accepted, or rejected with its reason; gpu_memory when it ran out
    of this process's share (tried again alone)."""
    rec = {"index": row["index"], "code_sha256": code_sha(row["code"]), "ops": row["ops"],
           "estimate_ms": row["estimate_ms"], "status": "rejected", "reason": None, "detail": ""}
    t0 = time.perf_counter()
    try:
        _check(row, rec, lock_path, torch, device)
        rec["status"] = "accepted"
    except Verdict as v:
        rec["reason"], rec["detail"] = v.reason, v.detail
    except torch.cuda.OutOfMemoryError as e:
        rec["reason"], rec["detail"] = "gpu_memory", str(e).splitlines()[0][:300]
    except Exception as e:  # noqa: BLE001 - the task's failure is its record
        rec["reason"] = "gpu_error"
        rec["detail"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
    finally:
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        torch._dynamo.reset()
        if device == "cuda":
            torch.cuda.empty_cache()
    return rec


def vet_one(row, torch, device="cuda"):
    """The audit of an accepted task: `anvil vet` at full size, and determinism again (two models made
    in this process, the generator moved between)."""
    from anvil import vet

    fd, path = tempfile.mkstemp(suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(row["code"])
    try:
        report = vet.vet(json.dumps({"task_file": path, "device": device, "seed": 0}))
    finally:
        os.unlink(path)
    out = {"index": row["index"], "vet_status": report.get("status"), "flags": [f["flag"] for f in report.get("flags", [])],
           "message": report.get("message", "")}
    try:
        module = load_module(row["code"], "det_%d" % row["index"])
        got = []
        for reseed in (0, 0x5EED):
            model, inputs = _instance(module, torch, device, reseed)
            with torch.no_grad():
                got.append(outputs(model(*inputs), torch))
            del model, inputs
        out["deterministic"] = all(torch.equal(a, b) for a, b in zip(*got))
    except Exception as e:  # noqa: BLE001
        out["deterministic"] = None
        out["determinism_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def worker(conn, lock_path, device, share):
    """One process of the pool: takes an item over its pipe, answers with the record, until told None.
    Its answers are written to the pipe before the next item is read (no feeder thread, so nothing
    said is lost when a task ends the process)."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_per_process_memory_fraction(share)
    conn.send(None)  # ready
    while True:
        try:
            item = conn.recv()
        except EOFError:  # the stage is gone
            return
        if item is None:
            return
        kind, row = item
        conn.send(check(row, lock_path, torch, device) if kind == "check" else vet_one(row, torch, device))


def _lost(item, reason, detail, seconds):
    kind, row = item
    if kind == "vet":
        return {"index": row["index"], "vet_status": "error", "flags": [], "message": detail, "deterministic": None}
    return {"index": row["index"], "code_sha256": code_sha(row["code"]), "ops": row["ops"],
            "estimate_ms": row["estimate_ms"], "status": "rejected", "reason": reason, "detail": detail,
            "seconds": round(seconds, 2)}


class _Slot:
    """A process of the pool, the item it holds (None: idle) and when it was given."""

    def __init__(self, process, conn):
        self.process, self.conn, self.item, self.began, self.ready = process, conn, None, 0.0, False


START_FAILURES = 3  # processes in a row that die before they are ready: the rest of the items cannot run


def run_pool(items, procs, share, lock_path, deadline, device, on_result, task_timeout=TASK_TIMEOUT_S):
    """items in `procs` processes of `share` of the GPU each; on_result(record) for each answer. The
    stage hands each process one item at a time over its own pipe, so it knows what every process
    holds: a task past task_timeout is killed with its process (gpu_timeout), a process that dies in a
    task is that task's verdict (gpu_error), and a new process takes the place of either. No item is
    given after `deadline`; items left then have no record (a later run takes them)."""
    todo = collections.deque(items)
    if not todo:
        return
    ctx = mp.get_context("spawn")
    pool = {}  # the parent's end of a process's pipe -> its _Slot
    retired = []  # processes told to end, joined at the end (their exits overlap)
    failed_starts = 0

    def start():
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=worker, args=(theirs, lock_path, device, share))
        p.start()
        theirs.close()
        pool[mine] = _Slot(p, mine)

    def give(slot):
        if not todo or time.time() > deadline:
            pool.pop(slot.conn)
            try:
                slot.conn.send(None)
            except OSError:
                pass
            slot.conn.close()
            retired.append(slot.process)
            return
        slot.item, slot.began = todo.popleft(), time.time()
        try:
            slot.conn.send(slot.item)
        except OSError:  # it is gone and never had it: the item waits for another process
            todo.appendleft(slot.item)
            slot.item = None

    def read(slot, give_next):
        """Takes what the process has said (ready, then a record per item); False once its pipe is closed."""
        try:
            while slot.conn in pool and slot.conn.poll():
                msg = slot.conn.recv()
                if slot.ready:
                    slot.item = None
                    on_result(msg)
                slot.ready = True
                if give_next and slot.item is None:
                    give(slot)
        except (EOFError, OSError):
            return False
        return True

    try:
        for _ in range(min(max(1, procs), len(todo))):
            start()
        while pool:
            mp_connection.wait(list(pool) + [s.process.sentinel for s in pool.values()], timeout=1.0)
            for slot in list(pool.values()):
                alive = read(slot, give_next=True) and slot.process.is_alive()
                if slot.conn not in pool:  # retired
                    continue
                late = slot.item is not None and time.time() - slot.began > task_timeout
                if alive and not late:
                    continue
                if late:
                    slot.process.kill()
                slot.process.join()
                if not late:
                    read(slot, give_next=False)  # all it wrote before it died counts
                pool.pop(slot.conn)
                slot.conn.close()
                if slot.item is not None:
                    on_result(_lost(slot.item, "gpu_timeout" if late else "gpu_error",
                                    "over %g s: killed" % task_timeout if late else
                                    "its process died (exit code %s)" % slot.process.exitcode,
                                    time.time() - slot.began))
                failed_starts = 0 if slot.ready else failed_starts + 1
                if failed_starts >= START_FAILURES:
                    while todo:
                        on_result(_lost(todo.popleft(), "gpu_error", "no process could start (the last one's exit "
                                        "code %s)" % slot.process.exitcode, 0.0))
                if todo and time.time() <= deadline:
                    start()
    finally:
        for slot in pool.values():
            slot.process.kill()
            retired.append(slot.process)
        for p in retired:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()


def read_rows(path):
    if path.endswith(".jsonl"):  # a GPU host without pyarrow: the rows as JSON lines
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["index", "ops", "code", "estimate_ms"]).to_pylist()


def read_journal(path):
    """The verdicts by (index, code sha256) a journal holds; a torn last line is left out."""
    done = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "status" in r and "code_sha256" in r:
                    done[(r["index"], r["code_sha256"])] = r
    return done


def summarize(args, checked, vetted, wall):
    ratios = sorted(r["measured_over_estimate"] for r in checked if "measured_over_estimate" in r)
    reasons = {}
    for r in checked:
        if r["status"] != "accepted":
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    eager = [r["eager_ms"] for r in checked if "eager_ms" in r]
    return {
        "tasks_file": args.tasks, "wall_s": round(wall, 1), "procs": args.procs,
        "checked": len(checked), "accepted": sum(r["status"] == "accepted" for r in checked), "rejected": reasons,
        "retried_alone": sum(bool(r.get("retried_alone")) for r in checked),
        "eager_ms_median": statistics.median(eager) if eager else None,
        "measured_over_estimate": {"median": statistics.median(ratios), "p10": ratios[len(ratios) // 10],
                                   "p90": ratios[len(ratios) * 9 // 10]} if ratios else None,
        "vetted": len(vetted), "vet_flagged": [r for r in vetted if r["flags"]],
        "sample_nondeterministic": [r for r in vetted if r.get("deterministic") is False],
        "sample_determinism_errors": [r for r in vetted if r.get("deterministic") is None],
        "vet_errors": [r for r in vetted if r["vet_status"] != "done"],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.synth.gpu_stage")
    ap.add_argument("tasks")
    ap.add_argument("--out", required=True, help="the folder of gpu.jsonl (the journal) and gpu-summary.json")
    ap.add_argument("--limit", type=int, default=0, help="the first N tasks only (0: all)")
    ap.add_argument("--procs", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--vet-sample", type=int, default=0,
                    help="audit a seeded sample of this many accepted tasks (of this run's verdicts): anvil vet, determinism")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0, help="stop taking tasks after this long (0: no limit)")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script on small tasks")
    ap.add_argument("--task-timeout", type=float, default=TASK_TIMEOUT_S,
                    help="one task's checks at most, seconds (default %d): past it, gpu_timeout" % TASK_TIMEOUT_S)
    args = ap.parse_args(argv)
    table = read_rows(args.tasks)
    if args.limit:
        table = table[:args.limit]
    os.makedirs(args.out, exist_ok=True)
    journal_path = os.path.join(args.out, "gpu.jsonl")
    done = read_journal(journal_path)
    todo = [r for r in table if (r["index"], code_sha(r["code"])) not in done]
    t0 = time.time()
    deadline = t0 + (args.budget_s if args.budget_s > 0 else 10 ** 9)
    lock_path = os.path.join(args.out, "timing.lock")
    retry, vetted = [], []
    with open(journal_path, "a", encoding="utf-8") as journal:
        def keep(r):
            if "vet_status" in r:
                vetted.append(r)
                return
            if r["reason"] == "gpu_memory" and not r.get("retried_alone"):
                retry.append(r)
                return
            done[(r["index"], r["code_sha256"])] = r
            journal.write(json.dumps(r, allow_nan=False) + "\n")
            journal.flush()

        run_pool([("check", r) for r in todo], args.procs, SHARE_OF_GPU / args.procs, lock_path, deadline,
                 args.device, keep, args.task_timeout)
        by_index = {r["index"]: r for r in todo}
        again = [("check", by_index[r["index"]]) for r in retry]
        retry.clear()

        def keep_alone(r):
            r["retried_alone"] = True
            keep(r)

        run_pool(again, 1, SHARE_OF_GPU, lock_path, deadline, args.device, keep_alone, args.task_timeout)
        checked = [done[(r["index"], code_sha(r["code"]))] for r in table if (r["index"], code_sha(r["code"])) in done]
        accepted = [r for r in table if done.get((r["index"], code_sha(r["code"])), {}).get("status") == "accepted"]
        sample = random.Random(args.seed).sample(accepted, min(args.vet_sample, len(accepted)))
        run_pool([("vet", r) for r in sample], args.procs, SHARE_OF_GPU / args.procs, lock_path, deadline,
                 args.device, keep, args.task_timeout)
    summary = summarize(args, checked, vetted, time.time() - t0)
    import torch

    summary["device"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    summary["torch"] = torch.__version__
    summary["cuda"] = torch.version.cuda
    with open(os.path.join(args.out, "gpu-summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    lists = ("vet_flagged", "vet_errors", "sample_nondeterministic", "sample_determinism_errors")
    print(json.dumps({k: v for k, v in summary.items() if k not in lists}))
    if args.vet_sample:
        print("sample of %d: vet flagged %d, vet errors %d, non-deterministic %d, determinism errors %d" % (
            len(vetted), *(len(summary[k]) for k in lists)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
