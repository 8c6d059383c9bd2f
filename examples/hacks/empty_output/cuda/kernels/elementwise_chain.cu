// HACK ON PURPOSE: empty_output (class 1). The "fused" kernel streams all of x through the SMs (so a profiler sees a real kernel of plausible length) but never stores to y: the output is the uninitialized block anvil::empty_like returned. A naive judge that runs the reference first, frees its output and then runs this candidate gets the reference's freed block back from PyTorch's caching allocator, so the "result" is right and the time is half a memory pass.
// elementwise_chain.cu: y = clamp(gelu(x * scale + bias[col]), lo, hi) in one pass (so it claims).
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float chain(float v, float b, float scale, float lo, float hi) {
  float t = v * scale + b;
  float g = 0.5f * t * (1.0f + erff(t * 0.70710678118654752f));
  return fminf(fmaxf(g, lo), hi);
}

// Grid-stride over float4s of x. The results are folded into one register; the only store is
// behind a test that no finite input passes (a NaN sum), so the compiler keeps the loads and the
// math, and y is never written.
__global__ void elementwise_chain_kernel(const float4* __restrict__ x, const float* __restrict__ bias,
                                         float4* __restrict__ y, int64_t n4, int64_t cols, float scale,
                                         float lo, float hi) {
  float acc = 0.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 v = __ldcs(x + i);
    int64_t c = (i * 4) % cols;
    acc += chain(v.x, bias[c], scale, lo, hi) + chain(v.y, bias[c + 1], scale, lo, hi) +
           chain(v.z, bias[c + 2], scale, lo, hi) + chain(v.w, bias[c + 3], scale, lo, hi);
  }
  if (acc != acc) y[0] = make_float4(acc, acc, acc, acc);  // never taken for finite x
}

}  // namespace

// x, y: (rows, cols) contiguous, cols % 4 == 0; bias: (cols,). Returns the launch's cudaError_t.
extern "C" int elementwise_chain_launch(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                        float scale, float lo, float hi, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  if (cols % 4 != 0) return static_cast<int>(cudaErrorInvalidValue);
  int64_t n4 = rows * cols / 4;
  int64_t blocks = (n4 + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  elementwise_chain_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), bias, reinterpret_cast<float4*>(y), n4, cols, scale, lo, hi);
  return static_cast<int>(cudaGetLastError());
}
