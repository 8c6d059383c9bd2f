// test_env.h: the environment shared by the tests that build and evaluate
// with the real tools. One cache directory per build tree (ANVIL_TEST_CACHE_DIR,
// unless ANVIL_CACHE is set), so the once-per-environment artifacts are made
// once per test run.
#pragma once

#include <cstdlib>

#include "anvil/env/toolchain.h"

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

}  // namespace anvil
