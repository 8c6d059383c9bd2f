#include "anvil/util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace anvil {

namespace {

// The first exception of the jobs, kept for the caller's thread.
class FirstError {
 public:
  void run(const std::function<void()>& job) {
    try {
      job();
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

}  // namespace

void run_parallel(const std::vector<std::function<void()>>& jobs, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  FirstError error;
  if (jobs.size() <= 1 || threads == 1) {
    for (const auto& job : jobs) error.run(job);
    error.rethrow();
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  unsigned n = std::min<unsigned>(threads, static_cast<unsigned>(jobs.size()));
  for (unsigned t = 0; t < n; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < jobs.size(); i = next++) error.run(jobs[i]);
    });
  }
  for (auto& w : workers) w.join();
  error.rethrow();
}

void run_packed(const std::vector<std::function<void()>>& jobs, const std::vector<double>& weights, double capacity,
                unsigned threads) {
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(jobs.size())));
  FirstError error;
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0;
  unsigned running = 0;
  double used = 0;
  auto weight = [&](size_t i) { return i < weights.size() ? weights[i] : capacity; };
  auto worker = [&] {
    for (;;) {
      size_t i = 0;
      {
        std::unique_lock<std::mutex> lock(mu);
        // The next job in order, once it fits (or nothing runs): a worker that cannot start it waits,
        // and so does every other (none takes a later job first).
        cv.wait(lock, [&] { return next >= jobs.size() || running == 0 || used + weight(next) <= capacity; });
        if (next >= jobs.size()) return;
        i = next++;
        ++running;
        used += weight(i);
      }
      error.run(jobs[i]);
      {
        std::lock_guard<std::mutex> lock(mu);
        --running;
        used -= weight(i);
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < threads; ++t) workers.emplace_back(worker);
  worker();  // this thread is one of them
  for (auto& w : workers) w.join();
  error.rethrow();
}

}  // namespace anvil
