#!/usr/bin/env bash
# The C++ unit tests (CTest label `unit`: CMakeLists.txt's ANVIL_UNIT_SUITES) run as they must be
# able to: with no Python, no nvcc and no C++ compiler to be found. PATH holds only a few of the
# shell's tools, ANVIL_PYTHON and ANVIL_NVCC name nothing, HOME and ANVIL_CACHE are empty folders:
# a unit test that starts torch or a compiler fails here. Usage: scripts/unit_tests.sh ANVIL_TESTS
# FILTER
set -euo pipefail
tests=${1:?the anvil_tests binary} filter=${2:?a GoogleTest filter}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/bin" "$dir/home" "$dir/cache"
for tool in bash sh env cat ls rm mkdir sleep true false echo cp mv head tail grep sed find sort wc chmod ln \
  readlink dirname basename mktemp tr cut date id uname tee touch xargs kill ps stat du df nproc timeout test \
  printf yes seq od; do
  path=$(type -P "$tool" || true)  # the program's file, not the shell's builtin
  if [ -n "$path" ]; then ln -s "$path" "$dir/bin/$tool"; fi
done
env -i PATH="$dir/bin" HOME="$dir/home" ANVIL_CACHE="$dir/cache" ANVIL_PYTHON="$dir/no-python" \
  ANVIL_NVCC="$dir/no-nvcc" "$tests" --gtest_filter="$filter" --gtest_brief=1
