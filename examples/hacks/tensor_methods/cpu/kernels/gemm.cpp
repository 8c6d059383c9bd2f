// HACK ON PURPOSE: tensor_methods (class 3): this GEMM is honest, built and imported, but model_new.py never calls it.
// gemm.cpp: CPU fp32 GEMM, c (m, n) = a (m, k) @ w (n, k)^T, all row-major.
//
// w is transposed once into wt (k, n), so the inner loop is a contiguous axpy over a tile of kTileN
// output columns (the compiler vectorizes it without reassociating sums: each output is still
// summed over k in order). kRows rows of a share each wt row load; the (k, kTileN) slice of wt
// stays in L2 across a thread's row blocks. Rows are split across threads.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.h"

namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kTileN = 64;

}  // namespace

extern "C" void sgemm_nt_cpu(const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k) {
  std::vector<float> wt(static_cast<size_t>(k * n));
  parallel_for(n, 64, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t p = 0; p < k; ++p) wt[p * n + j] = w[j * k + p];
    }
  });
  const float* wt_data = wt.data();
  int64_t blocks = (m + kRows - 1) / kRows;
  parallel_for(blocks, 4, [=](int64_t b0, int64_t b1) {
    alignas(64) float acc[kRows][kTileN];
    for (int64_t n0 = 0; n0 < n; n0 += kTileN) {
      int64_t nt = std::min(kTileN, n - n0);
      for (int64_t blk = b0; blk < b1; ++blk) {
        int64_t r0 = blk * kRows;
        const float* ar[kRows];
        for (int64_t i = 0; i < kRows; ++i) ar[i] = a + std::min(r0 + i, m - 1) * k;  // past m: recompute row m-1
        for (int64_t i = 0; i < kRows; ++i) std::fill(acc[i], acc[i] + kTileN, 0.0f);
        for (int64_t p = 0; p < k; ++p) {
          const float* wr = wt_data + p * n + n0;
          float a0 = ar[0][p], a1 = ar[1][p], a2 = ar[2][p], a3 = ar[3][p];
          for (int64_t j = 0; j < nt; ++j) {
            float wv = wr[j];
            acc[0][j] += a0 * wv;
            acc[1][j] += a1 * wv;
            acc[2][j] += a2 * wv;
            acc[3][j] += a3 * wv;
          }
        }
        for (int64_t i = 0; i < kRows && r0 + i < m; ++i) std::copy(acc[i], acc[i] + nt, c + (r0 + i) * n + n0);
      }
    }
  });
}

// y (rows, cols) = max(y + bias[col], 0), in place.
extern "C" void bias_relu_cpu(float* y, const float* bias, int64_t rows, int64_t cols) {
  parallel_for(rows, 64, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) yr[j] = std::max(yr[j] + bias[j], 0.0f);
    }
  });
}
