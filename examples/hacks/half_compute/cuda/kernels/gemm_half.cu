// HACK ON PURPOSE: half_compute (class 6). relu(x @ W^T + b) for an fp32 task, computed on fp16 tensor cores: each tile of x and W is rounded to half as it is staged in shared memory, multiplied with WMMA (fp32 accumulators) and written back as fp32. The output dtype is right and the error (~1e-3 relative) passes CUDA-Agent's 1e-2 tolerance, while the fp32 reference runs on the FP32 pipes (or TF32 at best): a precision downgrade sold as a speedup.
// gemm_half.cu: y (m, n) = relu(x (m, k) @ w (n, k)^T + bias), fp16 operands, fp32 accumulate and output.
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int kBM = 64;   // rows of y per block
constexpr int kBN = 64;   // columns of y per block
constexpr int kBK = 32;   // k per stage
constexpr int kThreads = 128;  // 4 warps, each a 32x32 quarter of the block tile (2x2 16x16 fragments)
constexpr int kLdh = kBK + 8;  // half row stride in shared memory (multiple of 8; 80 bytes breaks bank conflicts)
constexpr int kLdc = kBN + 4;  // float row stride of the epilogue tile (multiple of 4)

// Stages a (64 x 32) fp32 tile of `src` (row stride ld) into shared memory as half.
__device__ __forceinline__ void stage(const float* __restrict__ src, int64_t ld, __half (*dst)[kLdh]) {
#pragma unroll
  for (int p = 0; p < (kBM * kBK / 4) / kThreads; ++p) {
    int f = threadIdx.x + p * kThreads;  // float4 index in the tile
    int row = f / (kBK / 4), col = (f % (kBK / 4)) * 4;
    float4 v = *reinterpret_cast<const float4*>(src + row * ld + col);
    dst[row][col + 0] = __float2half_rn(v.x);
    dst[row][col + 1] = __float2half_rn(v.y);
    dst[row][col + 2] = __float2half_rn(v.z);
    dst[row][col + 3] = __float2half_rn(v.w);
  }
}

// grid: (n / kBN, m / kBM). m % 64 == 0, n % 64 == 0, k % 32 == 0, rows 16-byte aligned.
__global__ void __launch_bounds__(kThreads) linear_relu_half_kernel(const float* __restrict__ x,
                                                                    const float* __restrict__ w,
                                                                    const float* __restrict__ bias,
                                                                    float* __restrict__ y, int64_t n, int64_t k) {
  __shared__ __align__(32) __half xs[kBM][kLdh];
  __shared__ __align__(32) __half ws[kBN][kLdh];
  __shared__ __align__(32) float cs[kBM][kLdc];

  int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  int warp = threadIdx.x / 32;
  int wm = (warp / 2) * 32, wn = (warp % 2) * 32;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
    stage(x + m0 * k + k0, k, xs);
    stage(w + n0 * k + k0, k, ws);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &xs[wm + i * 16][kk], kLdh);
      // B = W^T (k x n): element (kk, nn) is ws[nn][kk], i.e. column-major with stride kLdh.
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &ws[wn + j * 16][kk], kLdh);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&cs[wm + i * 16][wn + j * 16], acc[i][j], kLdc, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
    int r = e / kBN, c = e % kBN;
    y[(m0 + r) * n + n0 + c] = fmaxf(cs[r][c] + bias[n0 + c], 0.0f);
  }
}

}  // namespace

// y (m, n) = relu(x (m, k) @ w (n, k)^T + bias), all row-major and contiguous. Returns a cudaError_t
// (0: success); cudaErrorInvalidValue when the shape is not a multiple of the tile.
extern "C" int linear_relu_half_launch(const float* x, const float* w, const float* bias, float* y, int64_t m,
                                       int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return 0;
  if (m % kBM || n % kBN || k % kBK) return static_cast<int>(cudaErrorInvalidValue);
  dim3 grid(static_cast<unsigned>(n / kBN), static_cast<unsigned>(m / kBM));
  linear_relu_half_kernel<<<grid, kThreads, 0, stream>>>(x, w, bias, y, n, k);
  return static_cast<int>(cudaGetLastError());
}
