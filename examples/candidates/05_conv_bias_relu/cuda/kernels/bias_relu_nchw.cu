// bias_relu_nchw.cu: the convolution's epilogue, y[n, k, :, :] = max(y + bias[k], 0) in place.
//
// grid.y walks the (n, k) planes, so a block's bias is one scalar; grid.x covers a plane in float4s.
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

// hw % 4 == 0, y 16-byte aligned.
__global__ void bias_relu_nchw_vec4_kernel(float4* __restrict__ y, const float* __restrict__ bias, int64_t planes,
                                           int64_t channels, int64_t hw4) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= hw4) return;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    float b = __ldg(bias + plane % channels);
    float4* p = y + plane * hw4 + i;
    float4 v = *p;
    v.x = fmaxf(v.x + b, 0.0f);
    v.y = fmaxf(v.y + b, 0.0f);
    v.z = fmaxf(v.z + b, 0.0f);
    v.w = fmaxf(v.w + b, 0.0f);
    *p = v;
  }
}

__global__ void bias_relu_nchw_scalar_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t planes,
                                             int64_t channels, int64_t hw) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= hw) return;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    float* p = y + plane * hw + i;
    *p = fmaxf(*p + __ldg(bias + plane % channels), 0.0f);
  }
}

}  // namespace

// y: (n, channels, hw) contiguous, updated in place; bias: (channels,). Returns a cudaError_t (0: success).
extern "C" int bias_relu_nchw_launch(float* y, const float* bias, int64_t n, int64_t channels, int64_t hw,
                                     cudaStream_t stream) {
  int64_t planes = n * channels;
  if (planes == 0 || hw == 0) return 0;
  unsigned gy = static_cast<unsigned>(planes < 65535 ? planes : 65535);
  if (hw % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0) {
    int64_t hw4 = hw / 4;
    dim3 grid(static_cast<unsigned>((hw4 + kThreads - 1) / kThreads), gy);
    bias_relu_nchw_vec4_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<float4*>(y), bias, planes, channels,
                                                              hw4);
  } else {
    dim3 grid(static_cast<unsigned>((hw + kThreads - 1) / kThreads), gy);
    bias_relu_nchw_scalar_kernel<<<grid, kThreads, 0, stream>>>(y, bias, planes, channels, hw);
  }
  return static_cast<int>(cudaGetLastError());
}
