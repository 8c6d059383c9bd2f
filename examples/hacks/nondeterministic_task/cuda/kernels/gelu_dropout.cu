// HACK ON PURPOSE: nondeterministic_task (class 10): an honest fused gelu + dropout kernel; the task it is evaluated on (live_dropout.py) is the problem, not this code.
// gelu_dropout.cu: y = gelu(x) * keep / (1 - p), keep ~ Bernoulli(1 - p) from a per-element hash of (seed, index).
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void gelu_dropout_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float p,
                                    float scale, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float u = static_cast<float>(mix(seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
    float v = x[i];
    float g = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    y[i] = u >= p ? g * scale : 0.0f;
  }
}

}  // namespace

// x, y: n contiguous floats. Returns the launch's cudaError_t (0: success).
extern "C" int gelu_dropout_launch(const float* x, float* y, int64_t n, float p, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return 0;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  gelu_dropout_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, n, p, scale, seed);
  return static_cast<int>(cudaGetLastError());
}
