// thread_pool.h: run independent jobs on up to N threads and wait for all.
#pragma once

#include <functional>
#include <vector>

namespace anvil {

// Runs every job, at most `threads` at a time (0: hardware concurrency), and
// returns when all have finished. Jobs must not throw.
void run_parallel(const std::vector<std::function<void()>>& jobs, unsigned threads);

}  // namespace anvil
