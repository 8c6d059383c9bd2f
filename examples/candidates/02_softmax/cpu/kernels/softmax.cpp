// softmax.cpp: CPU variant of the row softmax: max, then exp and sum (written to y), then scale;
// rows split across threads.
#include <cmath>
#include <cstdint>

#include "parallel.h"

extern "C" void softmax_cpu(const float* x, float* y, int64_t rows, int64_t cols) {
  parallel_for(rows, 16, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float m = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);
      double s = 0.0;  // a long fp32 running sum would drift by ~1e-4 relative over 32K terms
      for (int64_t c = 0; c < cols; ++c) {
        yr[c] = std::exp(xr[c] - m);
        s += yr[c];
      }
      float inv = static_cast<float>(1.0 / s);
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  });
}
