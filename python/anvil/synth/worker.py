"""python -m anvil.synth.worker --catalogue F --index F [--threshold X]: one of `anvil synth`'s
CPU-stage processes.

It speaks JSON lines: first {"ready": true, "operators": N, "problems": M} (or {"ready": false,
"error": ...} and exit status 2), then for each request line {"seed": S, "index": I} one line, the
task's record (anvil.synth.filters). A request with "ask": true is asked about each composed task
before its filters run: the worker writes {"index": I, "ask": "duplicate", "key": K} and reads one
line, {"duplicate_of": J} (an earlier task with that key passed every filter: this one is recorded
as a duplicate of J, unfiltered) or {"duplicate_of": null} (go on). Whatever a task prints goes to stderr: the protocol has
standard output to itself. Ends at the end of its input.
"""
import argparse
import json
import os
import sys
import tempfile


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.synth.worker")
    ap.add_argument("--catalogue", default=None)
    ap.add_argument("--index", default=None)
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--max-memory-mb", type=int, default=0,
                    help="this process's data at most (RLIMIT_DATA): a task that needs more fails with "
                         "out of memory, recorded, instead of the machine's OOM killer ending the process")
    args = ap.parse_args(argv)
    if args.max_memory_mb > 0:
        import resource

        limit = args.max_memory_mb << 20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # a task's print() goes to stderr
    sys.stdout = sys.stderr

    def say(obj):
        protocol.write(json.dumps(obj, separators=(",", ":")) + "\n")
        protocol.flush()

    try:
        import warnings

        warnings.simplefilter("ignore")
        from anvil.synth import catalog, decontam, filters

        cat = catalog.load(args.catalogue)
        index = decontam.Index.load(args.index)
        threshold = decontam.THRESHOLD if args.threshold is None else args.threshold
        scratch = tempfile.mkdtemp(prefix="anvil-synth-")
        checker = filters.Checker(cat, index, threshold, scratch)
    except Exception as e:  # noqa: BLE001 - said to the parent, which names it
        say({"ready": False, "error": "%s: %s" % (type(e).__name__, e)})
        return 2
    say({"ready": True, "operators": len(cat["operators"]), "problems": len(index.problems),
         "threshold": threshold, "pid": os.getpid()})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            seed, task, ask = int(req["seed"]), int(req["index"]), bool(req.get("ask", False))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            say({"error": "bad request %r: %s" % (line[:200], e)})
            continue
        say(checker.run(seed, task, _asker(say, task) if ask else None))
    os.rmdir(scratch) if not os.listdir(scratch) else None
    return 0


def _asker(say, task):
    """admit(key) for filters.Checker: the question on the protocol, the parent's answer from stdin."""

    def admit(key):
        say({"index": task, "ask": "duplicate", "key": key})
        line = sys.stdin.readline()
        if not line:
            raise SystemExit(0)  # the parent is gone: nothing more to answer
        reply = json.loads(line)
        j = reply.get("duplicate_of")
        return None if j is None else "the same operations and choices as task %d, which passed every filter" % int(j)

    return admit


if __name__ == "__main__":
    sys.exit(main())
