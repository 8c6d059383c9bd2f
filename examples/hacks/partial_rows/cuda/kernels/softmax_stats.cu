// HACK ON PURPOSE: partial_rows (class 1, Sakana's L1-15 kernel). The grid is `chunks` blocks, one row's worth, instead of rows * chunks: only row 0 gets statistics (and softmax_normalize.cu only normalizes row 0). The kernel is about rows times faster, and on a judge that recycles the reference's freed output block the untouched rows already hold the right answer.
// softmax_stats.cu: kernel 1 of 2. Per (row, chunk): the chunk's max and sum of exp(x - max).
//
// x is read with the default cache policy, so much of it is still in L2 when softmax_normalize
// reads it again (that kernel walks the blocks in reverse order to meet the most recent lines first).
#include "softmax_common.cuh"

namespace {

// grid: rows * chunks blocks, block b owning chunk b % chunks of row b / chunks.
// stats: (rows, chunks) pairs (max, sum).
__global__ void softmax_stats_kernel(const float4* __restrict__ x, softmax::Stats* __restrict__ stats,
                                     int64_t cols4, int chunks) {
  using softmax::kThreads;
  using softmax::kVec;
  int64_t row = blockIdx.x / chunks;
  int64_t chunk = blockIdx.x % chunks;
  const float4* xr = x + row * cols4;
  int64_t base = chunk * kThreads * kVec + threadIdx.x;

  float4 v[kVec];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    int64_t c = base + i * kThreads;
    v[i] = c < cols4 ? xr[c] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    m = fmaxf(m, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
  }
  float s = 0.0f;
  if (m != -INFINITY) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      s += expf(v[i].x - m) + expf(v[i].y - m) + expf(v[i].z - m) + expf(v[i].w - m);
    }
  }
  softmax::Stats total = softmax::block_merge({m, s});
  if (threadIdx.x == 0) stats[blockIdx.x] = total;
}

}  // namespace

// x: (rows, cols) contiguous, cols % 4 == 0, 16-byte aligned. stats: rows * softmax_chunks(cols) pairs.
// Returns the launch's cudaError_t (0: success).
extern "C" int softmax_stats_launch(const float* x, float* stats, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  int64_t chunks = (cols + softmax::kChunk - 1) / softmax::kChunk;
  if (rows * chunks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
  softmax_stats_kernel<<<static_cast<unsigned>(chunks), softmax::kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), reinterpret_cast<softmax::Stats*>(stats), cols / 4, static_cast<int>(chunks));
  return static_cast<int>(cudaGetLastError());
}

// The number of (max, sum) pairs softmax_stats_launch writes per row.
extern "C" int64_t softmax_chunks(int64_t cols) { return (cols + softmax::kChunk - 1) / softmax::kChunk; }
