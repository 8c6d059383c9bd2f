#!/usr/bin/env bash
# Issue 18's Ray part on the GPU host: a real one-node Ray cluster of this host's GPUs, `anvil serve
# --ray` over it, every bundled example judged through its workers and directly (bench/ray_check.py).
# The GPU host has no pip: Ray comes as a tarball of its installed packages for the host's Python,
# made here by `bash bench/gpu_ray_check.sh pack` (.carry/raypy.tar.*, in parts under the device
# tool's 64 MiB carry: carry them in calls back to back, the machine keeps ignored files while warm),
# unpacked there into /tmp/raypy (put first on PYTHONPATH).
#   bash bench/gpu_ray_check.sh pack          # here: .carry/raypy.tar.gz.part-*
#   bash bench/gpu_ray_check.sh run           # there: unpack, start the cluster, check, stop it
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-run}
if [ "$stage" = pack ]; then
  py=${PY_VERSION:-3.12}
  rm -rf /tmp/raypy-pack && mkdir -p .carry
  # Installed here for the host's Python (its binaries keep their modes in the tarball).
  ${ANVIL_PYTHON:-.venv/bin/python} -m pip install -q --target /tmp/raypy-pack/raypy --only-binary=:all: \
    --python-version "$py" --platform manylinux2014_x86_64 ray==2.60.0 || exit 1
  tar -C /tmp/raypy-pack -czf /tmp/raypy-pack/raypy.tar.gz raypy
  rm -f .carry/raypy.tar.gz.part-*
  split -b 60m /tmp/raypy-pack/raypy.tar.gz .carry/raypy.tar.gz.part-
  ls -la .carry/raypy.tar.gz.part-*
  exit 0
fi
OUT=${OUT:-bench/results}
day=$(date -u +%F)
res=$OUT/ray-gpu-$day
mkdir -p "$res"
exec > >(tee -a "$res/log.txt") 2>&1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-ray-cache}
"$ANVIL_BIN" --version
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
date -u
if ! python3 -c "import ray" 2>/dev/null; then
  [ -d /tmp/raypy ] || cat .carry/raypy.tar.gz.part-* | tar -C /tmp -xz || exit 1
  export PYTHONPATH=/tmp/raypy${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import ray; print('ray', ray.__version__)" || exit 1
port=6399
python3 -m ray.scripts.scripts start --head --port $port --num-gpus "$(nvidia-smi -L | wc -l)" \
  --include-dashboard=false --disable-usage-stats > "$res/ray-start.log" 2>&1 || { cat "$res/ray-start.log"; exit 1; }
python3 bench/ray_check.py --address 127.0.0.1:$port --out "$res"
rc=$?
python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
rm -rf "$res/state"
exit $rc
