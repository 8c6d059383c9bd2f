// elementwise_chain.cpp: CPU variant of y = clamp(gelu(x * scale + bias[col]), lo, hi), rows split
// across threads.
#include <cmath>
#include <cstdint>

#include "parallel.h"

extern "C" void elementwise_chain_cpu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                      float scale, float lo, float hi) {
  parallel_for(rows, 64, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        float t = xr[c] * scale + bias[c];
        float g = 0.5f * t * (1.0f + std::erf(t * 0.70710678118654752f));  // exact (erf) GELU
        yr[c] = std::fmin(std::fmax(g, lo), hi);
      }
    }
  });
}
