# An honest KernelBench single file for tiled_matmul_model.py, on the CPU: the pattern of
# KernelBench's few-shot "tiled_matmul" candidate (prompts/few_shot/model_new_ex_tiled_matmul.py)
# in plain C++: 16x16 tiles of both operands copied into local buffers (the CUDA kernel's shared
# memory) before their products are summed. Kept from it: the extension's name passed by position,
# torch::empty for the output inside the binding, a flag for a compiler that this build does not
# run (there nvcc's --ptxas-options=-v, here extra_cuda_cflags with no CUDA source), verbose=True.
# Expected: ok under both protocols.
import torch
import torch.nn as nn
import torch.utils.cpp_extension

source = r"""
#include <torch/extension.h>
#include <algorithm>

constexpr int TILE = 16;

// out (h, w) = m (h, k) @ n (k, w); every output element sums its k products in order, tile by tile.
static void tiled_matmul(float* out, const float* m, const float* n, int64_t h, int64_t w, int64_t k) {
  float m_tile[TILE][TILE];
  float n_tile[TILE][TILE];
  for (int64_t r0 = 0; r0 < h; r0 += TILE) {
    for (int64_t c0 = 0; c0 < w; c0 += TILE) {
      float acc[TILE][TILE] = {};
      for (int64_t k0 = 0; k0 < k; k0 += TILE) {
        // load both tiles, zero-padded past the edges
        for (int i = 0; i < TILE; ++i) {
          for (int j = 0; j < TILE; ++j) {
            m_tile[i][j] = (r0 + i < h && k0 + j < k) ? m[(r0 + i) * k + k0 + j] : 0.0f;
            n_tile[i][j] = (k0 + i < k && c0 + j < w) ? n[(k0 + i) * w + c0 + j] : 0.0f;
          }
        }
        for (int i = 0; i < TILE; ++i) {
          for (int kk = 0; kk < TILE; ++kk) {
            float a = m_tile[i][kk];
            for (int j = 0; j < TILE; ++j) acc[i][j] += a * n_tile[kk][j];
          }
        }
      }
      for (int i = 0; i < TILE && r0 + i < h; ++i) {
        for (int j = 0; j < TILE && c0 + j < w; ++j) out[(r0 + i) * w + c0 + j] = acc[i][j];
      }
    }
  }
}

torch::Tensor tiled_matmul_cpu(const torch::Tensor& m, const torch::Tensor& n) {
  TORCH_CHECK(m.device().is_cpu() && n.device().is_cpu(), "m, n: CPU tensors");
  TORCH_CHECK(m.scalar_type() == torch::kFloat32 && n.scalar_type() == torch::kFloat32, "m, n: float32");
  TORCH_CHECK(m.is_contiguous() && n.is_contiguous() && m.dim() == 2 && n.dim() == 2, "m, n: contiguous matrices");
  int64_t h = m.size(0), k = m.size(1), w = n.size(1);
  TORCH_CHECK(n.size(0) == k, "size mismatch");
  auto output = torch::empty({h, w}, m.options());
  tiled_matmul(output.data_ptr<float>(), m.data_ptr<float>(), n.data_ptr<float>(), h, w, k);
  return output;
}
"""

cpp_src = "torch::Tensor tiled_matmul_cpu(const torch::Tensor& m, const torch::Tensor& n);"

tiled_matmul = torch.utils.cpp_extension.load_inline(
    "tiled_matmul_cpu",
    cpp_sources=[cpp_src, source],
    functions=["tiled_matmul_cpu"],
    extra_cuda_cflags=["--ptxas-options=-v"],
    verbose=True,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tiled_matmul = tiled_matmul

    def forward(self, a, b):
        return self.tiled_matmul.tiled_matmul_cpu(a, b)
