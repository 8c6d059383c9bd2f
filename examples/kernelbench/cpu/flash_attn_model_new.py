# An honest KernelBench single file for flash_attn_model.py, on the CPU: the pattern of KernelBench's
# few-shot "flash_attn" candidate (prompts/few_shot/model_new_ex_flash_attn.py) in plain C++:
# attention one block of keys at a time with a running (max, sum) per query row, so the score
# matrix is never held whole. Kept from it: the running statistics l and m as tensors made inside
# the binding (torch::zeros, torch::full with -inf) beside an output from torch::zeros_like that
# each key block rescales and adds to, the extension's name by position, an explicit with_cuda
# (here False) and an optimization flag (here extra_cflags=["-O2"]).
# Expected: ok under both protocols.
import torch
import torch.nn as nn
import torch.utils.cpp_extension

source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

// One (batch, head) plane: q, k, v, o are (n, d); l, m are (n). Key blocks of bc rows go in the
// outer loop, query blocks of br rows in the inner one, as the CUDA kernel walks them.
static void attention_plane(const float* q, const float* k, const float* v, float* o, float* l, float* m,
                            int64_t n, int64_t d, int64_t bc, int64_t br, float scale) {
  std::vector<float> s(bc), pv(d);
  for (int64_t j0 = 0; j0 < n; j0 += bc) {
    int64_t keys = std::min(bc, n - j0);
    for (int64_t i0 = 0; i0 < n; i0 += br) {
      for (int64_t row = i0; row < std::min(i0 + br, n); ++row) {
        const float* qrow = q + row * d;
        float m_prev = m[row], l_prev = l[row];
        float m_blk = -std::numeric_limits<float>::infinity();
        for (int64_t y = 0; y < keys; ++y) {
          const float* krow = k + (j0 + y) * d;
          float dot = 0.0f;
          for (int64_t x = 0; x < d; ++x) dot += qrow[x] * krow[x];
          s[y] = dot * scale;
          m_blk = std::max(m_blk, s[y]);
        }
        float l_blk = 0.0f;
        for (int64_t y = 0; y < keys; ++y) {
          s[y] = std::exp(s[y] - m_blk);
          l_blk += s[y];
        }
        float m_new = std::max(m_prev, m_blk);
        float keep = std::exp(m_prev - m_new), add = std::exp(m_blk - m_new);
        float l_new = keep * l_prev + add * l_blk;
        std::fill(pv.begin(), pv.end(), 0.0f);
        for (int64_t y = 0; y < keys; ++y) {
          const float* vrow = v + (j0 + y) * d;
          for (int64_t x = 0; x < d; ++x) pv[x] += s[y] * vrow[x];
        }
        float* orow = o + row * d;
        for (int64_t x = 0; x < d; ++x) orow[x] = (l_prev * keep * orow[x] + add * pv[x]) / l_new;
        m[row] = m_new;
        l[row] = l_new;
      }
    }
  }
}

torch::Tensor attention(torch::Tensor Q, torch::Tensor K, torch::Tensor V) {
  for (const auto* t : {&Q, &K, &V}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == torch::kFloat32 && t->is_contiguous() && t->dim() == 4,
                "Q, K, V: contiguous float32 CPU tensors of shape (batch, heads, seq, head_dim)");
    TORCH_CHECK(t->sizes() == Q.sizes(), "Q, K, V: one shape");
  }
  const int64_t B = Q.size(0), nh = Q.size(1), N = Q.size(2), d = Q.size(3);
  const int64_t Bc = 32, Br = 32;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));

  auto O = torch::zeros_like(Q);
  auto l = torch::zeros({B, nh, N}, Q.options());
  auto m = torch::full({B, nh, N}, -INFINITY, Q.options());

  const float *q = Q.data_ptr<float>(), *k = K.data_ptr<float>(), *v = V.data_ptr<float>();
  float *o = O.data_ptr<float>(), *lp = l.data_ptr<float>(), *mp = m.data_ptr<float>();
  for (int64_t p = 0; p < B * nh; ++p) {
    attention_plane(q + p * N * d, k + p * N * d, v + p * N * d, o + p * N * d, lp + p * N, mp + p * N, N, d, Bc, Br,
                    softmax_scale);
  }
  return O;
}
"""

cpp_src = "torch::Tensor attention(torch::Tensor Q, torch::Tensor K, torch::Tensor V);"

attention = torch.utils.cpp_extension.load_inline(
    "attention_cpu",
    cpp_sources=[cpp_src, source],
    functions=["attention"],
    with_cuda=False,
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, Q, K, V):
        return self.attention.attention(Q, K, V)
