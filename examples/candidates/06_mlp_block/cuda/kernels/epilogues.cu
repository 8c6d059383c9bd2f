// epilogues.cu: the two GEMM epilogues of the MLP block, applied in place to a (rows, cols) output:
//   bias_gelu:     y = gelu(y + bias[col])              (after fc1)
//   bias_residual: y = residual + (y + bias[col])       (after fc2)
//
// Memory-bound; each thread owns one float4 column slot (its bias float4 stays in a register) and
// walks kRows rows. cols % 4 == 0 and 16-byte aligned pointers.
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;

struct BiasGelu {
  __device__ float operator()(float v, float b, float) const {
    float t = v + b;
    return 0.5f * t * (1.0f + erff(t * 0.70710678118654752f));  // exact (erf) GELU, as F.gelu
  }
};

struct BiasResidual {
  __device__ float operator()(float v, float b, float res) const { return res + (v + b); }
};

// grid: (ceil(cols4 / kThreads), row groups striding over groups of kRows rows). residual may be null
// when Op ignores it.
template <class Op>
__global__ void epilogue_kernel(float4* __restrict__ y, const float4* __restrict__ bias,
                                const float4* __restrict__ residual, int64_t rows, int64_t cols4, Op op) {
  int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols4) return;
  float4 b = __ldg(bias + c);
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRows; r0 < rows; r0 += static_cast<int64_t>(gridDim.y) * kRows) {
    float4 v[kRows], res[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (r0 + i < rows) {
        v[i] = y[(r0 + i) * cols4 + c];
        res[i] = residual ? __ldg(residual + (r0 + i) * cols4 + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (r0 + i < rows) {
        v[i].x = op(v[i].x, b.x, res[i].x);
        v[i].y = op(v[i].y, b.y, res[i].y);
        v[i].z = op(v[i].z, b.z, res[i].z);
        v[i].w = op(v[i].w, b.w, res[i].w);
        y[(r0 + i) * cols4 + c] = v[i];
      }
    }
  }
}

template <class Op>
int launch(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  uintptr_t addr = reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(bias) |
                   reinterpret_cast<uintptr_t>(residual);
  if (cols % 4 != 0 || addr % 16 != 0) return static_cast<int>(cudaErrorInvalidValue);
  int64_t cols4 = cols / 4, groups = (rows + kRows - 1) / kRows;
  dim3 grid(static_cast<unsigned>((cols4 + kThreads - 1) / kThreads),
            static_cast<unsigned>(groups < 65535 ? groups : 65535));
  epilogue_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(bias),
                                                 reinterpret_cast<const float4*>(residual), rows, cols4, Op{});
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// Return a cudaError_t (0: success).
extern "C" int bias_gelu_launch(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch<BiasGelu>(y, bias, nullptr, rows, cols, stream);
}

extern "C" int bias_residual_launch(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols,
                                    cudaStream_t stream) {
  return launch<BiasResidual>(y, bias, residual, rows, cols, stream);
}
