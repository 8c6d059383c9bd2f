// y[r] = mean of row r of x (rows x cols, row-major): one block per row, a grid-stride sum per
// thread, then the block's sum in shared memory.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void row_mean_kernel(const float* x, float* y, int64_t cols) {
  const float* row = x + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += row[i];
  __shared__ float part[kThreads];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = part[0] / static_cast<float>(cols);
}

extern "C" void row_mean_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows > 0) row_mean_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, y, cols);
}
