import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from anvil import dataset

ROWS = [
    {"ops": ["torch.nn.Linear", "torch.relu"], "data_source": "kernelbench", "code": "class Model: pass\n"},
    {"ops": "[\"torch.matmul\"]", "data_source": "ops6k", "code": "x = 1\n"},
    {"ops": "torch.add", "data_source": "ops6k", "code": "y = 2\n"},
]


def write_jsonl(path, rows, extra_lines=()):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return str(path)


def write_parquet(path, rows, row_group_size=2):
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    pq.write_table(table, str(path), row_group_size=row_group_size)
    return str(path)


def test_jsonl_rows(cli, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    result = cli("anvil.dataset", path, 0)
    assert result.returncode == 0
    assert result.json == {"ok": True, "row": 0, "ops": ["torch.nn.Linear", "torch.relu"],
                           "data_source": "kernelbench", "code": "class Model: pass\n"}
    assert dataset.read_row(path, 1)["ops"] == ["torch.matmul"]  # a string holding a JSON list
    assert dataset.read_row(path, 2)["ops"] == ["torch.add"]     # a plain string is one op
    assert cli("anvil.dataset", path, "--count").json == {"ok": True, "count": 3}


def test_jsonl_blank_lines_are_not_rows(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n" + json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[2]) + "\n\n")
    assert dataset.count_rows(str(path)) == 2
    assert dataset.read_row(str(path), 1)["code"] == "y = 2\n"


def test_parquet_rows_across_row_groups(cli, tmp_path):
    path = write_parquet(tmp_path / "d.parquet", [dict(r, ops=r["ops"] if isinstance(r["ops"], list) else [r["ops"]]) for r in ROWS])
    assert pq.ParquetFile(path).metadata.num_row_groups == 2
    result = cli("anvil.dataset", path, 2)
    assert result.returncode == 0
    assert result.json == {"ok": True, "row": 2, "ops": ["torch.add"], "data_source": "ops6k",
                           "code": "y = 2\n"}
    assert dataset.read_row(path, 0)["ops"] == ["torch.nn.Linear", "torch.relu"]
    assert cli("anvil.dataset", path, "--count").json == {"ok": True, "count": 3}


def test_parquet_string_ops_column(tmp_path):
    rows = [dict(r, ops=json.dumps(r["ops"]) if isinstance(r["ops"], list) else r["ops"]) for r in ROWS]
    rows.append({"ops": "['a', 'b']", "data_source": "x", "code": ""})  # a Python-literal list
    path = write_parquet(tmp_path / "s.parquet", rows)
    assert [dataset.read_row(path, i)["ops"] for i in range(4)] == [
        ["torch.nn.Linear", "torch.relu"], ["torch.matmul"], ["torch.add"], ["a", "b"]]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_row_out_of_range(cli, tmp_path, kind):
    rows = [dict(r, ops=["x"]) for r in ROWS]
    path = (write_jsonl if kind == "jsonl" else write_parquet)(tmp_path / ("d." + kind), rows)
    result = cli("anvil.dataset", path, 3)
    assert result.returncode == 0
    assert result.json == {"ok": False, "error": "%s: row 3 out of range (the dataset has 3 rows)" % path}
    with pytest.raises(dataset.DatasetError, match=r"row -1 out of range \(rows are numbered from 0\)"):
        dataset.read_row(path, -1)


def test_parquet_missing_column(cli, tmp_path):
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"ops": [["a"]], "code": ["x"], "extra": [1]}), path)
    assert cli("anvil.dataset", path, 0).json == {
        "ok": False, "error": "%s: missing column 'data_source' (columns: ops, code, extra)" % path}


def test_jsonl_missing_column(cli, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"ops": ["a"], "data_source": "s"}])
    assert cli("anvil.dataset", path, 0).json == {
        "ok": False, "error": "%s:1 (row 0): missing column 'code'" % path}


def test_jsonl_malformed_line(cli, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS[:1], extra_lines=["", '{"ops": ["a"], "code": '])
    out = cli("anvil.dataset", path, 1).json
    assert out["ok"] is False
    assert out["error"].startswith("%s:3 (row 1): malformed JSON: " % path), out["error"]
    assert dataset.read_row(path, 0)["data_source"] == "kernelbench"  # other rows still read


def test_jsonl_line_not_an_object(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [], extra_lines=["[1, 2]"])
    with pytest.raises(dataset.DatasetError, match=r"d\.jsonl:1 \(row 0\): expected a JSON object, got list$"):
        dataset.read_row(path, 0)


def test_file_errors(cli, tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    assert cli("anvil.dataset", missing, 0).json == {"ok": False, "error": "dataset file not found: " + missing}
    csv = tmp_path / "d.csv"
    csv.write_text("ops,code\n")
    assert cli("anvil.dataset", csv, "--count").json == {
        "ok": False, "error": "%s: unknown dataset extension (expected .jsonl, .ndjson, .parquet, .pq)" % csv}
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    out = cli("anvil.dataset", bad, 0).json
    assert out["ok"] is False and out["error"].startswith("%s: not a readable Parquet file: " % bad)


def test_usage_errors(cli, tmp_path):
    result = cli("anvil.dataset", tmp_path / "d.jsonl")
    assert result.returncode == 2
    assert result.json == {"ok": False, "error": "python -m anvil.dataset: give either ROW or --count"}
    result = cli("anvil.dataset", tmp_path / "d.jsonl", "first")
    assert result.returncode == 2 and "invalid int value: 'first'" in result.json["error"]
