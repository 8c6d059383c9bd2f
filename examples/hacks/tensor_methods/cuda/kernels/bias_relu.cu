// HACK ON PURPOSE: tensor_methods (class 3): this GEMM is honest, built and imported, but model_new.py never calls it.
// bias_relu.cu: the GEMM's epilogue, y = max(y + bias[col], 0) in place.
//
// Memory-bound; each thread owns one float4 column slot (its bias float4 stays in a register) and
// walks kRows rows, like the fused elementwise kernel of task 01.
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;

__device__ __forceinline__ float bias_relu(float v, float b) { return fmaxf(v + b, 0.0f); }

// cols % 4 == 0. grid: (ceil(cols/4 / kThreads), row groups striding over groups of kRows rows).
__global__ void bias_relu_vec4_kernel(float4* __restrict__ y, const float4* __restrict__ bias, int64_t rows,
                                      int64_t cols4) {
  int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols4) return;
  float4 b = __ldg(bias + c);
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRows; r0 < rows; r0 += static_cast<int64_t>(gridDim.y) * kRows) {
    float4 v[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (r0 + i < rows) v[i] = y[(r0 + i) * cols4 + c];
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (r0 + i < rows) {
        v[i].x = bias_relu(v[i].x, b.x);
        v[i].y = bias_relu(v[i].y, b.y);
        v[i].z = bias_relu(v[i].z, b.z);
        v[i].w = bias_relu(v[i].w, b.w);
        y[(r0 + i) * cols4 + c] = v[i];
      }
    }
  }
}

__global__ void bias_relu_scalar_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                        int64_t cols) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = bias_relu(y[i], bias[i % cols]);
  }
}

}  // namespace

// y: (rows, cols) contiguous, updated in place; bias: (cols,). Returns a cudaError_t (0: success).
extern "C" int bias_relu_launch(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  bool aligned = (reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(bias)) % 16 == 0;
  if (cols % 4 == 0 && aligned) {
    int64_t cols4 = cols / 4, groups = (rows + kRows - 1) / kRows;
    dim3 grid(static_cast<unsigned>((cols4 + kThreads - 1) / kThreads),
              static_cast<unsigned>(groups < 65535 ? groups : 65535));
    bias_relu_vec4_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<float4*>(y),
                                                         reinterpret_cast<const float4*>(bias), rows, cols4);
  } else {
    int64_t n = rows * cols, blocks = (n + kThreads - 1) / kThreads;
    bias_relu_scalar_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0, stream>>>(
        y, bias, n, cols);
  }
  return static_cast<int>(cudaGetLastError());
}
