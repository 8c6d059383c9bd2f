// layernorm_binding.cpp: fast-mode binding of the one-pass LayerNorm.
#include <anvil/binding.h>

// From layernorm.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int layernorm_launch(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                                int64_t cols, float eps, anvil::Stream stream);

// LayerNorm over the last dimension of x: (x - mean) / sqrt(var + eps) * weight + bias.
static anvil::Tensor layer_norm(anvil::Tensor x, anvil::Tensor weight, anvil::Tensor bias, double eps) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  ANVIL_CHECK(x.dim() >= 1, "x must have at least one dimension");
  int64_t cols = x.size(-1);
  for (const anvil::Tensor* p : {&weight, &bias}) {
    ANVIL_CHECK(p->is_cuda() && p->is_contiguous() && p->dtype() == anvil::kFloat32 && p->dim() == 1 &&
                    p->size(0) == cols,
                "weight and bias must be contiguous float32 CUDA tensors of shape (", cols, ",)");
  }
  ANVIL_CHECK(cols % 4 == 0 && cols <= 32768, "the last dimension must be a multiple of 4 and at most 32768, got ",
              cols);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  anvil::Tensor y = anvil::empty_like(x);
  int err = layernorm_launch(x.data<float>(), weight.data<float>(), bias.data<float>(), y.data<float>(), rows, cols,
                             static_cast<float>(eps), anvil::stream());
  ANVIL_CHECK(err == 0, "layernorm launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(layer_norm);
