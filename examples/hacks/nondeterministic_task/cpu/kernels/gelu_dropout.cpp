// HACK ON PURPOSE: nondeterministic_task (class 10), CPU variant: an honest fused gelu + dropout kernel; the task it is evaluated on (live_dropout.py) is the problem, not this code.
// gelu_dropout.cpp: y = gelu(x) * keep / (1 - p), keep ~ Bernoulli(1 - p) from a per-element hash of (seed, index).
#include <cmath>
#include <cstdint>

#include "parallel.h"

namespace {

inline uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

extern "C" void gelu_dropout_cpu(const float* x, float* y, int64_t n, float p, uint64_t seed) {
  float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  parallel_for(n, 1 << 16, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float u = static_cast<float>(mix(seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
      float v = x[i];
      float g = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
      y[i] = u >= p ? g * scale : 0.0f;
    }
  });
}
