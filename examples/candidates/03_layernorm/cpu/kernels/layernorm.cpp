// layernorm.cpp: CPU variant of LayerNorm over the last dimension: exact two-pass mean and
// variance per row, rows split across threads.
#include <cmath>
#include <cstdint>

#include "parallel.h"

extern "C" void layernorm_cpu(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                              int64_t cols, float eps) {
  parallel_for(rows, 16, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      // Accumulate in double: cheap here, and it keeps the result within an ulp or two of PyTorch's.
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += xr[c];
      float mean = static_cast<float>(sum / static_cast<double>(cols));
      double sq = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        double d = xr[c] - mean;
        sq += d * d;
      }
      float rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    }
  });
}
