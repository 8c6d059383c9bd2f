"""python -m anvil.dataset FILE ROW | FILE --count: one row of a task dataset as JSON.

Datasets are JSONL (.jsonl, .ndjson; one object per non-blank line) or Parquet (.parquet, .pq,
read through pyarrow) files with the CUDA-Agent-Ops-6K columns `ops` (a list of strings, or a
string holding one), `data_source` and `code`. ROW is 0-based; in JSONL it counts non-blank lines.

Prints {"ok": true, "row", "ops": [...], "data_source", "code"}, {"ok": true, "count": N}, or
{"ok": false, "error": "<what is wrong>"}; exit status 0 in all three cases, 2 on bad arguments.
The same as functions: read_row(path, row) and count_rows(path), raising DatasetError.
"""
import ast
import json
import os
import sys

from anvil._cli import ArgumentParser, UsageError, emit

COLUMNS = ("ops", "data_source", "code")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")


class DatasetError(Exception):
    """The dataset file cannot give the requested answer; the message says why."""


def _format(path):
    if not os.path.exists(path):
        raise DatasetError("dataset file not found: %s" % path)
    if os.path.isdir(path):
        raise DatasetError("dataset file is a directory: %s" % path)
    lower = path.lower()
    if lower.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    raise DatasetError("%s: unknown dataset extension (expected %s)"
                       % (path, ", ".join(JSONL_SUFFIXES + PARQUET_SUFFIXES)))


def _jsonl_lines(path):
    """(line number, text) of each non-blank line, 1-based line numbers."""
    with open(path, "r", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield number, line


def _parquet(path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DatasetError("%s: not a readable Parquet file: %s" % (path, e))


def count_rows(path):
    """The number of rows in the dataset at `path`."""
    if _format(path) == "jsonl":
        return sum(1 for _ in _jsonl_lines(path))
    return _parquet(path).metadata.num_rows


def _ops_list(ops, where):
    """`ops` as a list of strings; a string may hold a JSON or Python list, else it is one op."""
    if isinstance(ops, str):
        text = ops.strip()
        if text.startswith("["):
            for parse in (json.loads, ast.literal_eval):
                try:
                    ops = parse(text)
                    break
                except (ValueError, SyntaxError):
                    continue
        if isinstance(ops, str):
            return [ops]
    if not isinstance(ops, (list, tuple)) or not all(isinstance(op, str) for op in ops):
        raise DatasetError("%s: column 'ops' is not a list of strings (got %s)" % (where, type(ops).__name__))
    return list(ops)


def _row_from_record(record, where):
    missing = [c for c in COLUMNS if c not in record]
    if missing:
        raise DatasetError("%s: missing column %s" % (where, ", ".join("'%s'" % c for c in missing)))
    if not isinstance(record["code"], str):
        raise DatasetError("%s: column 'code' is not a string (got %s)" % (where, type(record["code"]).__name__))
    source = record["data_source"]
    return {"ops": _ops_list(record["ops"], where),
            "data_source": "" if source is None else str(source),
            "code": record["code"]}


def _out_of_range(path, row, count):
    return DatasetError("%s: row %d out of range (the dataset has %d rows)" % (path, row, count))


def _read_jsonl(path, row):
    count = 0
    for number, line in _jsonl_lines(path):
        if count == row:
            where = "%s:%d (row %d)" % (path, number, row)
            try:
                record = json.loads(line)
            except ValueError as e:
                raise DatasetError("%s: malformed JSON: %s" % (where, e))
            if not isinstance(record, dict):
                raise DatasetError("%s: expected a JSON object, got %s" % (where, type(record).__name__))
            return _row_from_record(record, where)
        count += 1
    raise _out_of_range(path, row, count)


def _read_parquet(path, row):
    pf = _parquet(path)
    names = pf.schema_arrow.names
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise DatasetError("%s: missing column %s (columns: %s)"
                           % (path, ", ".join("'%s'" % c for c in missing), ", ".join(names)))
    count = pf.metadata.num_rows
    if row >= count:
        raise _out_of_range(path, row, count)
    first = 0
    for group in range(pf.metadata.num_row_groups):  # read only the row group holding `row`
        size = pf.metadata.row_group(group).num_rows
        if row < first + size:
            table = pf.read_row_group(group, columns=list(COLUMNS))
            record = {c: table.column(c)[row - first].as_py() for c in COLUMNS}
            return _row_from_record(record, "%s (row %d)" % (path, row))
        first += size
    raise _out_of_range(path, row, count)


def read_row(path, row):
    """Row `row` (0-based) of the dataset at `path`: {"ops": [...], "data_source", "code"}."""
    fmt = _format(path)
    if row < 0:
        raise DatasetError("%s: row %d out of range (rows are numbered from 0)" % (path, row))
    return _read_jsonl(path, row) if fmt == "jsonl" else _read_parquet(path, row)


def main(argv=None):
    try:
        parser = ArgumentParser(prog="python -m anvil.dataset", description="Print one dataset row.")
        parser.add_argument("file")
        parser.add_argument("row", nargs="?", type=int)
        parser.add_argument("--count", action="store_true", help="print the number of rows")
        args = parser.parse_args(argv)
        if args.count == (args.row is not None):
            raise UsageError("python -m anvil.dataset: give either ROW or --count")
    except UsageError as e:
        emit({"ok": False, "error": str(e)})
        return 2
    try:
        if args.count:
            result = {"ok": True, "count": count_rows(args.file)}
        else:
            result = {"ok": True, "row": args.row}
            result.update(read_row(args.file, args.row))
    except DatasetError as e:
        result = {"ok": False, "error": str(e)}
    except (OSError, UnicodeDecodeError) as e:
        result = {"ok": False, "error": "%s: cannot read: %s" % (args.file, e)}
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
