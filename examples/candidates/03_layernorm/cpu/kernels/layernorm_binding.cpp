// layernorm_binding.cpp: fast-mode binding of the CPU LayerNorm.
#include <anvil/binding.h>

// From layernorm.cpp.
extern "C" void layernorm_cpu(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                              int64_t cols, float eps);

// LayerNorm over the last dimension of x: (x - mean) / sqrt(var + eps) * weight + bias.
static anvil::Tensor layer_norm(anvil::Tensor x, anvil::Tensor weight, anvil::Tensor bias, double eps) {
  ANVIL_CHECK(x.is_cpu() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  ANVIL_CHECK(x.dim() >= 1, "x must have at least one dimension");
  int64_t cols = x.size(-1);
  for (const anvil::Tensor* p : {&weight, &bias}) {
    ANVIL_CHECK(p->is_cpu() && p->is_contiguous() && p->dtype() == anvil::kFloat32 && p->dim() == 1 &&
                    p->size(0) == cols,
                "weight and bias must be contiguous float32 CPU tensors of shape (", cols, ",)");
  }
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  anvil::Tensor y = anvil::empty_like(x);
  layernorm_cpu(x.data<float>(), weight.data<float>(), bias.data<float>(), y.data<float>(), rows, cols,
                static_cast<float>(eps));
  return y;
}
ANVIL_REGISTER(layer_norm);
