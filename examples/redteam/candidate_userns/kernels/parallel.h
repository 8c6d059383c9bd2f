// parallel.h: parallel_for over [0, n) with std::thread, one contiguous range per hardware thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

// Calls fn(begin, end) on disjoint ranges covering [0, n). Ranges hold at least `grain` items.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, Fn fn) {
  int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  int64_t workers = std::min<int64_t>(hw, std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
  if (workers <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  int64_t chunk = (n + workers - 1) / workers;
  for (int64_t w = 1; w < workers; ++w) {
    int64_t b = std::min(n, w * chunk), e = std::min(n, b + chunk);
    threads.emplace_back([=] { fn(b, e); });
  }
  fn(int64_t{0}, std::min(n, chunk));
  for (std::thread& t : threads) t.join();
}
