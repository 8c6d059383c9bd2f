"""python -m anvil.synth.parquet ROWS.jsonl OUT.parquet: `anvil synth`'s accepted records as a
Parquet file with CUDA-Agent-Ops-6K's columns (ops, data_source, code) first, then anvil's; written
beside OUT and renamed into place (OUT whole or not at all)."""
import json
import os
import sys

COLUMNS = (  # (name, arrow type, value of a record)
    ("ops", "list<string>", lambda r: r["ops"]),
    ("data_source", "string", lambda r: r["data_source"]),
    ("code", "string", lambda r: r["code"]),
    ("seed", "int64", lambda r: r["seed"]),
    ("index", "int64", lambda r: r["index"]),
    ("canonical_ops", "list<string>", lambda r: r["canonical_ops"]),
    ("families", "list<string>", lambda r: r.get("families", [])),
    ("batch", "int64", lambda r: r["batch"]),
    ("input_shape", "list<int64>", lambda r: r["input_shape"]),
    ("output_shape", "list<int64>", lambda r: r["output_shape"]),
    ("estimate_ms", "double", lambda r: r["estimate"]["ms"]),
    ("flops", "int64", lambda r: r["estimate"]["flops"]),
    ("bytes", "int64", lambda r: r["estimate"]["bytes"]),
    ("nearest_kernelbench", "string", lambda r: "%s/%s" % (r["nearest"]["level"], r["nearest"]["problem"])
     if r.get("nearest") else None),
    ("nearest_similarity", "double", lambda r: r["nearest"]["similarity"] if r.get("nearest") else None),
    ("vet_notes", "list<string>", lambda r: r.get("vet_notes", [])),
    ("filters", "string", lambda r: json.dumps(r["checks"], sort_keys=True)),
    ("key", "string", lambda r: r["key"]),
    # the GPU stage's measurements (anvil synth --gpu; null without it)
    ("gpu_eager_ms", "double", lambda r: r.get("gpu", {}).get("eager_ms")),
    ("gpu_compile_ms", "double", lambda r: r.get("gpu", {}).get("compile_ms")),
)


def arrow_type(pa, name):
    if name.startswith("list<"):
        return pa.list_(arrow_type(pa, name[5:-1]))
    return {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}[name]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m anvil.synth.parquet ROWS.jsonl OUT.parquet", file=sys.stderr)
        return 2
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows_path, out = argv
    records = []
    with open(rows_path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    print("%s line %d: not JSON: %s" % (rows_path, n, e), file=sys.stderr)
                    return 1
    try:
        columns = {name: pa.array([get(r) for r in records], type=arrow_type(pa, kind)) for name, kind, get in COLUMNS}
    except KeyError as e:
        print("%s: a record has no field %s" % (rows_path, e), file=sys.stderr)
        return 1
    tmp = out + ".tmp"
    pq.write_table(pa.table(columns), tmp, compression="zstd")
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
