// HACK ON PURPOSE: partial_rows (class 1, Sakana's L1-15 kernel). The grid is `chunks` blocks instead of rows * chunks, and the block index is not reversed over the whole grid: only row 0 is normalized; rows 1.. of y are never written.
// softmax_normalize.cu: kernel 2 of 2. Merges a row's chunk statistics into its max M and sum S,
// then writes y = exp(x - M) / S for the block's chunk.
#include "softmax_common.cuh"

namespace {

// grid: rows * chunks blocks as in softmax_stats, walked in reverse: softmax_stats read the last rows
// last, so they are the likeliest to still be in L2.
__global__ void softmax_normalize_kernel(const float4* __restrict__ x, const softmax::Stats* __restrict__ stats,
                                         float4* __restrict__ y, int64_t cols4, int chunks) {
  using softmax::kThreads;
  using softmax::kVec;
  int64_t b = gridDim.x - 1 - blockIdx.x;
  int64_t row = b / chunks;
  int64_t chunk = b % chunks;

  // Issue this block's loads first; the statistics' merge overlaps with them.
  const float4* xr = x + row * cols4;
  int64_t base = chunk * kThreads * kVec + threadIdx.x;
  float4 v[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    int64_t c = base + i * kThreads;
    if (c < cols4) v[i] = __ldcs(xr + c);
  }

  softmax::Stats st{-INFINITY, 0.0f};
  for (int i = threadIdx.x; i < chunks; i += kThreads) st = softmax::merge(st, stats[row * chunks + i]);
  st = softmax::block_merge(st);
  float inv = 1.0f / st.s;

#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    int64_t c = base + i * kThreads;
    if (c < cols4) {
      float4 o;
      o.x = expf(v[i].x - st.m) * inv;
      o.y = expf(v[i].y - st.m) * inv;
      o.z = expf(v[i].z - st.m) * inv;
      o.w = expf(v[i].w - st.m) * inv;
      __stcs(y + row * cols4 + c, o);
    }
  }
}

}  // namespace

// x, y: (rows, cols) contiguous, cols % 4 == 0, 16-byte aligned; stats from softmax_stats_launch.
// Returns the launch's cudaError_t (0: success).
extern "C" int softmax_normalize_launch(const float* x, const float* stats, float* y, int64_t rows, int64_t cols,
                                        cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  int64_t chunks = (cols + softmax::kChunk - 1) / softmax::kChunk;
  if (rows * chunks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
  softmax_normalize_kernel<<<static_cast<unsigned>(chunks), softmax::kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), reinterpret_cast<const softmax::Stats*>(stats), reinterpret_cast<float4*>(y),
      cols / 4, static_cast<int>(chunks));
  return static_cast<int>(cudaGetLastError());
}
