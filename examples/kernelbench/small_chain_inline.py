# An honest KernelBench-format single file (ModelNew + load_inline) for the red team's task
# examples/redteam/tasks/small_chain.py: one CUDA kernel, launched on torch's current stream, its
# output allocated by torch::empty_like. `anvil eval --task examples/redteam/tasks/small_chain.py
# --candidate examples/kernelbench/small_chain_inline.py` must say ok under both protocols.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void small_chain_kernel(const float* x, const float* bias, float* y, float scale, float lo, float hi,
                                   int64_t n, int64_t cols) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i] * scale + bias[i % cols];
  v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  y[i] = fminf(fmaxf(v, lo), hi);
}

torch::Tensor small_chain(torch::Tensor x, torch::Tensor bias, double scale, double lo, double hi) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
  auto y = torch::empty_like(x);
  int64_t n = x.numel(), cols = bias.numel();
  int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  small_chain_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), (float)scale, (float)lo, (float)hi, n, cols);
  return y;
}
"""

cpp_source = "torch::Tensor small_chain(torch::Tensor x, torch::Tensor bias, double scale, double lo, double hi);"

small_chain = load_inline(name="small_chain_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                          functions=["small_chain"], extra_cflags=[""], extra_ldflags=[""], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)

    def forward(self, x):
        return small_chain.small_chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
