#!/usr/bin/env python3
"""Two anvil binaries' cold fast-mode builds, interleaved (A B B A A B ...), so that a shared
machine's load falls on both alike: what a change to the build costs.

    python3 bench/build_ab.py --reps 20 BEFORE_BIN AFTER_BIN

Each build is `anvil build --json` of a fresh copy of examples/candidates/01_elementwise_chain/cpu
with a nonce in every source (nothing of it cached; the once-per-environment runtime is built by
a first, untimed build of each binary). Prints the median, mean and minimum wall seconds of each.
"""
import argparse
import os
import random
import shutil
import statistics
import tempfile

import common

SRC = os.path.join(common.ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")


def cold_build(binary, work):
    d = common.fresh_copy(SRC, random.getrandbits(64), work)
    common.ANVIL = binary
    wall, rep = common.anvil_build(d)
    assert rep["compiled"] >= 1, rep
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("binaries", nargs=2)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="build-ab-")
    for b in a.binaries:
        cold_build(b, work)  # the runtime, the environment probe
    times = {b: [] for b in a.binaries}
    for i in range(a.reps):
        for b in a.binaries if i % 2 == 0 else a.binaries[::-1]:
            times[b].append(cold_build(b, work))
    for b, t in times.items():
        print(f"{b}: median {statistics.median(t):.3f} s, mean {statistics.mean(t):.3f} s, min {min(t):.3f} s, "
              f"n={len(t)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
