"""anvil tasks as a veRL data set (Parquet), one row a task, for the agent loop "anvil_agent":

    python -m anvil.rl.data TASKS... --out train.parquet [--split train|eval] [--protocol cuda-agent|kernelbench]
                            [--by-path] [--max-turns N]

TASKS are KernelBench-format files, folders of them (KernelBench's level folders too) and task data
sets (JSONL or Parquet with the CUDA-Agent-Ops-6K columns ops, data_source, code). Each row has
veRL's columns: `data_source` ("anvil/" and the set's name), `prompt` (a placeholder message: the
session's own opening, SKILL.md and the task, is what the model sees), `agent_name` (anvil_agent)
and `extra_info`: {"index", "anvil": {"task", "options", "max_turns"}}. The task goes inline
({"source", "name"}) so that anvil serve needs no shared file system with the trainer; --by-path
sends {"path"} instead (a file, or DATASET#ROW, as the server sees it). --split eval gives each row
the paper's 200 turns (training: the loop's 150).

Bad input is said by name and nothing is written: a path that does not exist, a folder without
tasks, a data set row without code; the file is written whole (a temporary file, then a rename).
"""
import argparse
import os
import sys
import tempfile

from anvil import dataset as ds
from anvil.rl import verl_loop

PLACEHOLDER = "anvil task %s: the anvil serve session's opening messages (SKILL.md, the task) replace this"


class DataError(Exception):
    pass


def task_files(path):
    """The KernelBench-format files under a folder (sorted; level folders included)."""
    found = []
    for d, dirs, files in os.walk(path):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        found += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py") and not f.startswith("_")]
    if not found:
        raise DataError("%s: no task files (*.py) in this folder" % path)
    return found


def tasks_of(path, by_path):
    """[(name, task)] of one argument."""
    if not os.path.exists(path):
        raise DataError("%s: no such file or folder" % path)
    if os.path.isdir(path):
        return [t for f in task_files(path) for t in tasks_of(f, by_path)]
    if path.lower().endswith(ds.JSONL_SUFFIXES + ds.PARQUET_SUFFIXES):
        try:
            n = ds.count_rows(path)
            rows = [(i, ds.read_row(path, i)) for i in range(n)]
        except (ds.DatasetError, OSError, UnicodeDecodeError) as e:
            raise DataError(str(e))
        base = os.path.splitext(os.path.basename(path))[0]
        return [("%s#%d" % (base, i), {"path": "%s#%d" % (os.path.abspath(path), i)} if by_path else
                 {"source": r["code"], "name": "%s_%d.py" % (base, i)}) for i, r in rows]
    name = os.path.basename(path)
    if by_path:
        return [(name, {"path": os.path.abspath(path)})]
    try:
        with open(path, encoding="utf-8") as f:
            return [(name, {"source": f.read(), "name": name})]
    except (OSError, UnicodeDecodeError) as e:
        raise DataError("%s: cannot read: %s" % (path, e))


def rows(paths, split="train", protocol=None, by_path=False, max_turns=None):
    turns = max_turns or (verl_loop.EVAL_TURNS if split == "eval" else None)
    out = []
    for path in paths:
        source = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
        for name, task in tasks_of(path, by_path):
            anvil = {"task": task}
            if protocol:
                anvil["options"] = {"protocol": protocol}
            if turns:
                anvil["max_turns"] = turns
            out.append({"data_source": "anvil/" + source, "agent_name": "anvil_agent",
                        "prompt": [{"role": "user", "content": PLACEHOLDER % name}],
                        "extra_info": {"index": len(out), "name": name, "split": split, "anvil": anvil}})
    return out


def write_parquet(records, out):
    import pyarrow as pa
    import pyarrow.parquet as pq
    directory = os.path.dirname(os.path.abspath(out))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".anvil-data-", suffix=".parquet", dir=directory)
    os.close(fd)
    try:
        pq.write_table(pa.Table.from_pylist(records), tmp)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("a positive integer, not %r" % text)
    return int(text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m anvil.rl.data", description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+", help="task files, folders of them, task data sets")
    ap.add_argument("--out", required=True, help="the Parquet file to write")
    ap.add_argument("--split", choices=("train", "eval"), default="train")
    ap.add_argument("--protocol", choices=("cuda-agent", "kernelbench"), help="the sessions' rule set")
    ap.add_argument("--by-path", action="store_true", help="send each task's path, not its text")
    ap.add_argument("--max-turns", type=positive, help="model turns per trajectory (eval: 200)")
    args = ap.parse_args(argv)
    try:
        records = rows(args.tasks, args.split, args.protocol, args.by_path, args.max_turns)
    except DataError as e:
        print("anvil.rl.data: %s" % e, file=sys.stderr)
        return 1
    write_parquet(records, args.out)
    print("%s: %d tasks (%s)" % (args.out, len(records), args.split))
    return 0


if __name__ == "__main__":
    sys.exit(main())
