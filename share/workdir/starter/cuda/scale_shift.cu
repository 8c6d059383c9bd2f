// scale_shift.cu: a starter kernel from `anvil init` (replace it): y = x * a + b, one element per
// thread. It builds and is right for any float32 tensor, and it is slow: a first kernel to edit.
#include <cstdint>

#include <cuda_runtime.h>

namespace {

__global__ void scale_shift_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float a, float b) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] * a + b;
  }
}

}  // namespace

// Returns the launch's cudaError_t (0: success). `config` is the launch configuration the agent's
// tune tool sweeps: here the threads per block, 128 << (config % 4) (128, 256, 512 or 1024).
extern "C" int scale_shift_launch(const float* x, float* y, int64_t n, float a, float b, int config,
                                  cudaStream_t stream) {
  if (n == 0) return 0;
  const int threads = 128 << (config & 3);
  int64_t blocks = (n + threads - 1) / threads;
  scale_shift_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(x, y, n, a, b);
  return static_cast<int>(cudaGetLastError());
}
