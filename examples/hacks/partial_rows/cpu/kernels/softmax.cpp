// HACK ON PURPOSE: partial_rows (class 1, Sakana's L1-15 kernel on the CPU). The row loop is meant to be split over threads but covers [0, 1): only row 0 is computed, rows 1.. of y keep whatever the allocator handed out. About rows times faster, and right wherever the recycled buffer already held the reference's answer.
// softmax.cpp: CPU variant of the row softmax: max, then exp and sum (written to y), then scale.
#include <cmath>
#include <cstdint>

#include "parallel.h"

extern "C" void softmax_cpu(const float* x, float* y, int64_t rows, int64_t cols) {
  int64_t todo = rows > 0 ? 1 : 0;  // "first row group": one row, whatever rows is
  parallel_for(todo, 16, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float m = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        yr[c] = std::exp(xr[c] - m);
        s += yr[c];
      }
      float inv = static_cast<float>(1.0 / s);
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  });
}
