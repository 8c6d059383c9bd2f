# ATTACK ON PURPOSE (red team, class "a check the candidate can predict"; outside red team 2026-12-07):
# examples/redteam/profiler_aware on a GPU. torch does the work in every timed call, blind to the op
# recorder (torch._C._DisableTorchDispatch, a context torch offers); only the calls the judge
# inspects with the profiler, which it sees coming (torch._C._autograd._profiler_enabled()), run its
# own kernel: 100% own work in the trace, paid on torch's speed. Its own kernel is slow (one thread a
# row), so the timed calls take less time than the work the profiled ones showed: timing_escape
# under cuda-agent, whose own kernels run one after another on the current stream.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void chain_rows(const float* x, const float* b, float* y, int rows, int cols, float s, float lo, float hi) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  for (int c = 0; c < cols; ++c) {
    float v = x[r * cols + c] * s + b[c];
    float g = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    y[r * cols + c] = fminf(fmaxf(g, lo), hi);
  }
}

torch::Tensor chain(torch::Tensor x, torch::Tensor b, double s, double lo, double hi) {
  auto y = torch::empty_like(x);
  int rows = x.size(0), cols = x.size(1);
  chain_rows<<<(rows + 63) / 64, 64, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), rows, cols, (float)s, (float)lo, (float)hi);
  return y;
}
"""

cpp_source = "torch::Tensor chain(torch::Tensor x, torch::Tensor b, double s, double lo, double hi);"

ext = load_inline(name="pa_chain_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["chain"])


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        if torch._C._autograd._profiler_enabled():  # an inspected call: its own kernel only
            return ext.chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
        with torch._C._DisableTorchDispatch():  # the op recorder sees nothing
            return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
