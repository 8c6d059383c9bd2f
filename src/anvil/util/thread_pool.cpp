#include "anvil/util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace anvil {

void run_parallel(const std::vector<std::function<void()>>& jobs, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (jobs.size() <= 1 || threads == 1) {
    for (const auto& job : jobs) job();
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  unsigned n = std::min<unsigned>(threads, static_cast<unsigned>(jobs.size()));
  for (unsigned t = 0; t < n; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < jobs.size(); i = next++) jobs[i]();
    });
  }
  for (auto& w : workers) w.join();
}

}  // namespace anvil
