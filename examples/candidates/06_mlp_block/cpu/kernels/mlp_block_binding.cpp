// mlp_block_binding.cpp: fast-mode binding of the CPU x + fc2(gelu(fc1(layer_norm(x)))).
#include <anvil/binding.h>

// From layernorm.cpp and gemm.cpp.
extern "C" void layernorm_cpu(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                              int64_t cols, float eps);
extern "C" void sgemm_nt_cpu(const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);
extern "C" void bias_gelu_cpu(float* y, const float* bias, int64_t rows, int64_t cols);
extern "C" void bias_residual_cpu(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols);

static void check_param(const anvil::Tensor& t, std::vector<int64_t> shape, const char* name) {
  ANVIL_CHECK(t.is_cpu() && t.is_contiguous() && t.dtype() == anvil::kFloat32 && t.sizes() == shape, name,
              " must be a contiguous float32 CPU tensor of the expected shape");
}

// x: (..., hidden). ln_w, ln_b: (hidden,); w1: (ffn, hidden), b1: (ffn,); w2: (hidden, ffn), b2: (hidden,).
static anvil::Tensor mlp_block(anvil::Tensor x, anvil::Tensor ln_w, anvil::Tensor ln_b, double eps, anvil::Tensor w1,
                               anvil::Tensor b1, anvil::Tensor w2, anvil::Tensor b2) {
  ANVIL_CHECK(x.is_cpu() && x.is_contiguous() && x.dtype() == anvil::kFloat32 && x.dim() >= 1,
              "x must be a contiguous float32 CPU tensor");
  ANVIL_CHECK(w1.dim() == 2, "fc1 weight must be 2-d");
  int64_t hidden = x.size(-1), ffn = w1.size(0), rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  check_param(ln_w, {hidden}, "norm weight");
  check_param(ln_b, {hidden}, "norm bias");
  check_param(w1, {ffn, hidden}, "fc1 weight");
  check_param(b1, {ffn}, "fc1 bias");
  check_param(w2, {hidden, ffn}, "fc2 weight");
  check_param(b2, {hidden}, "fc2 bias");

  anvil::Tensor normed = anvil::empty({rows, hidden}, anvil::kFloat32, x);
  anvil::Tensor h = anvil::empty({rows, ffn}, anvil::kFloat32, x);
  anvil::Tensor y = anvil::empty_like(x);
  layernorm_cpu(x.data<float>(), ln_w.data<float>(), ln_b.data<float>(), normed.data<float>(), rows, hidden,
                static_cast<float>(eps));
  sgemm_nt_cpu(normed.data<float>(), w1.data<float>(), h.data<float>(), rows, ffn, hidden);
  bias_gelu_cpu(h.data<float>(), b1.data<float>(), rows, ffn);
  sgemm_nt_cpu(h.data<float>(), w2.data<float>(), y.data<float>(), rows, hidden, ffn);
  bias_residual_cpu(y.data<float>(), b2.data<float>(), x.data<float>(), rows, hidden);
  return y;
}
ANVIL_REGISTER(mlp_block);
