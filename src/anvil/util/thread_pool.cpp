#include "anvil/util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
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

void run_packed(const std::vector<std::function<void()>>& jobs, const std::vector<double>& weights, double capacity,
                unsigned threads) {
  threads = std::max(1u, threads);
  std::mutex mu;
  std::condition_variable cv;
  unsigned running = 0;
  double used = 0;
  std::vector<std::thread> started;
  for (size_t i = 0; i < jobs.size(); ++i) {
    double w = i < weights.size() ? weights[i] : capacity;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return running == 0 || (running < threads && used + w <= capacity); });
      ++running;
      used += w;
    }
    started.emplace_back([&, i, w] {
      jobs[i]();
      std::lock_guard<std::mutex> lock(mu);
      --running;
      used -= w;
      cv.notify_all();
    });
  }
  for (auto& t : started) t.join();
}

}  // namespace anvil
