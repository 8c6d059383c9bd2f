"""Issue 20's decontamination bar: every KernelBench level 1 and level 2 problem, fed back in as a
candidate task, is rejected by anvil synth's decontamination (anvil.synth.decontam), as it is and
disguised (identifiers renamed, sizes changed, docstrings and comments removed, torch.relu spelt
F.relu); and the rejection rate of a synthesized set, read from its summary.

KernelBench is not part of anvil: name a checkout (git clone https://github.com/ScalingIntelligence/KernelBench).

    python3 bench/synth_decontam.py --kernelbench ~/KernelBench [--summary tasks.summary.json] --out R.json
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from anvil.synth import decontam  # noqa: E402


def disguise(code):
    """The problem as someone hiding it would write it: other names, other sizes, no comments."""
    out = re.sub(r'""".*?"""', "", code, flags=re.S)
    out = re.sub(r"#[^\n]*", "", out)
    out = re.sub(r"\b(batch_size|in_channels|out_channels|kernel_size|dim|features|N|M|K)\b",
                 lambda m: "v_" + m.group(1).lower(), out)
    out = re.sub(r"self\.(\w+)", lambda m: "self.m_" + m.group(1), out)
    out = re.sub(r"(?<![\w.])(\d+)(?![\w.])", lambda m: str(int(m.group(1)) * 2 + 1), out)
    out = out.replace("torch.relu(", "F.relu(")
    if "import torch.nn.functional as F" not in out:
        out = "import torch.nn.functional as F\n" + out
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelbench", required=True)
    ap.add_argument("--index", default=None)
    ap.add_argument("--summary", default=None, help="an anvil synth summary: its decontamination figures")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    index = decontam.Index.load(args.index)
    rows, missed = [], []
    for level, name, path in decontam.kernelbench_problems(args.kernelbench):
        if level not in ("level1", "level2"):
            continue
        with open(path, encoding="utf-8") as f:
            code = f.read()
        for variant, text in (("as_is", code), ("disguised", disguise(code))):
            try:
                found = index.check(text, where=path)
            except decontam.CodeError as e:
                found = {"contaminated": False, "reason": "unparsable: %s" % e, "nearest": []}
            row = {"level": level, "problem": name, "variant": variant, "rejected": found["contaminated"],
                   "reason": found["reason"],
                   "similarity": found["nearest"][0]["similarity"] if found["nearest"] else None}
            rows.append(row)
            if not found["contaminated"]:
                missed.append(row)
    by = {}
    for r in rows:
        k = "%s/%s" % (r["level"], r["variant"])
        by.setdefault(k, [0, 0])
        by[k][0] += r["rejected"]
        by[k][1] += 1
    result = {"index": index.source, "threshold": decontam.THRESHOLD, "rejected": by, "missed": missed,
              "rows": rows}
    if args.summary:
        with open(args.summary, encoding="utf-8") as f:
            result["synthesized"] = json.load(f)["decontamination"]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    for k, (n, total) in sorted(by.items()):
        print("%-18s %d of %d rejected" % (k, n, total))
    print("missed: %d" % len(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
