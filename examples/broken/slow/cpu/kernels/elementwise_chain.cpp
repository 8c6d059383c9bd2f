// BROKEN ON PURPOSE: correct, but every element is computed kRepeats = 4 times over, each pass depending on the last.
// elementwise_chain.cpp: CPU variant of y = clamp(gelu(x * scale + bias[col]), lo, hi), rows split
// across threads.
#include <cmath>
#include <cstdint>

#include "parallel.h"

namespace {
constexpr int kRepeats = 4;
// 0.0f, but volatile: the optimizer cannot know its value, so it can neither drop the repeats nor
// hoist them out of the loop.
volatile float g_zero = 0.0f;
}  // namespace

extern "C" void elementwise_chain_cpu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                      float scale, float lo, float hi) {
  const float zero = g_zero;
  parallel_for(rows, 64, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        // Each pass feeds on the previous result times zero: out * zero is +-0 (out is clamped, hence
        // finite), so every pass computes the same value, but only after the previous one.
        float out = 0.0f;
        for (int k = 0; k < kRepeats; ++k) {
          float t = (xr[c] + out * zero) * scale + bias[c];
          float g = 0.5f * t * (1.0f + std::erf(t * 0.70710678118654752f));  // exact (erf) GELU
          out = std::fmin(std::fmax(g, lo), hi);
        }
        yr[c] = out;
      }
    }
  });
}
