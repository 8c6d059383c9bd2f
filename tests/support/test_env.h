// tests/support/test_env.h: the environment shared by the tests that build and evaluate
// with the real tools. One cache directory per build tree (ANVIL_TEST_CACHE_DIR,
// unless ANVIL_CACHE is set), so the once-per-environment artifacts are made
// once per test run.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "anvil/env/toolchain.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {

inline Environment& test_environment() {
  static Environment e = [] {
    if (!std::getenv("ANVIL_CACHE")) setenv("ANVIL_CACHE", ANVIL_TEST_CACHE_DIR, 1);
    Environment env = load_environment();
    env.anvil_program = ANVIL_BINARY;  // not the test executable: the runner calls anvil back
    return env;
  }();
  return e;
}

// examples/tasks/01_elementwise_chain.py at a CPU-friendly size (256 x 512; the candidates take any
// shape), written once into the tests' cache.
inline std::string small_task() {
  static std::string path = [] {
    std::string text = *read_file(std::string(ANVIL_SOURCE_DIR) + "/examples/tasks/01_elementwise_chain.py");
    text = replace_all(replace_all(text, "ROWS = 4096", "ROWS = 256"), "COLS = 4096", "COLS = 512");
    std::filesystem::path p = std::filesystem::path(ANVIL_TEST_CACHE_DIR) / "tasks" / "01_elementwise_chain_small.py";
    std::string e;
    write_file_atomic(p, text, &e);
    return p.string();
  }();
  return path;
}

}  // namespace anvil
