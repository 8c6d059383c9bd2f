#!/usr/bin/env bash
# The README's path from a fresh set-up to a first own kernel judged, as a new user walks it:
# init -> edit -> build -> eval, with no anvil variable set (anvil finds the set-up's .venv
# itself). On a machine without a GPU the kernel is init's CPU starter. Exit 0 when the eval is
# ok. Usage: scripts/first_kernel.sh (after scripts/test.sh's or demo.sh's set-up)
set -euo pipefail
cd "$(dirname "$0")/.."
anvil=$PWD/build/anvil
dir=$(mktemp -d "${TMPDIR:-/tmp}/anvil-first-kernel.XXXXXX")
trap 'rm -rf "$dir"' EXIT
unset ANVIL_PYTHON ANVIL_HOME ANVIL_BIN
export ANVIL_CACHE=$dir/cache  # the walk's own cache, not the user's
cat > "$dir/affine.py" <<'PY'
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.rand(256, 512)]


def get_init_inputs():
    return []
PY
step() { printf '\033[1m[first kernel]\033[0m %s\n' "$*"; }
step "anvil init"
"$anvil" init --task "$dir/affine.py" "$dir/work"
step "edit model_new.py: forward calls the starter kernel"
cat > "$dir/work/model_new.py" <<'PY'
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = 1  # the launch configuration (the starter's: 256 threads per block)

    def forward(self, x):
        return cuda_extension.scale_shift(x.contiguous(), 2.0, 1.0, self.config)
PY
step "anvil build"
"$anvil" build "$dir/work"
step "anvil eval"
"$anvil" eval --json --compile-mode none --task "$dir/affine.py" --candidate "$dir/work" > "$dir/result.json"
"$anvil" eval --compile-mode none --candidate "$dir/work" | head -3  # the task: the one init named
outcome=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['outcome'])" "$dir/result.json")
[ "$outcome" = ok ] || { step "expected ok, got $outcome"; cat "$dir/result.json"; exit 1; }
step "ok: a first own kernel judged, no variable set"
