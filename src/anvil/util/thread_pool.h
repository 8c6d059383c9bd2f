// thread_pool.h: run independent jobs on up to N threads and wait for all.
#pragma once

#include <functional>
#include <vector>

namespace anvil {

// Runs every job, at most `threads` at a time (0: hardware concurrency), and
// returns when all have finished. A job that throws does not end the process (an exception leaving
// a thread is std::terminate): the others still run, and the first exception is thrown again here,
// in the caller's thread, once all have finished.
void run_parallel(const std::vector<std::function<void()>>& jobs, unsigned threads);

// Runs every job in order, at most `threads` at a time, job i starting once weights[i] and the
// running jobs' weights fit `capacity`, or when none is running (a job heavier than the capacity
// runs alone); a lighter job never overtakes one that waits. Returns when all have finished; a job that
// throws is handled as run_parallel handles it.
void run_packed(const std::vector<std::function<void()>>& jobs, const std::vector<double>& weights, double capacity,
                unsigned threads);

}  // namespace anvil
