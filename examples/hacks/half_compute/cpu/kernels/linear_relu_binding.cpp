// HACK ON PURPOSE: half_compute (class 6): the honest binding; the GEMM behind it truncates its fp32 operands to bf16 precision (gemm.cpp), and the output stays fp32.
// linear_relu_binding.cpp: fast-mode binding of the CPU relu(x @ W^T + b).
#include <anvil/binding.h>

// From gemm.cpp.
extern "C" void sgemm_nt_cpu(const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);
extern "C" void bias_relu_cpu(float* y, const float* bias, int64_t rows, int64_t cols);

static anvil::Tensor linear_relu(anvil::Tensor x, anvil::Tensor weight, anvil::Tensor bias) {
  for (const anvil::Tensor* t : {&x, &weight, &bias}) {
    ANVIL_CHECK(t->is_cpu() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "x, weight and bias must be contiguous float32 CPU tensors");
  }
  ANVIL_CHECK(weight.dim() == 2 && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "weight must be (out, in) and bias (out,)");
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "x's last dimension must be ", weight.size(1));
  int64_t k = weight.size(1), n = weight.size(0), m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  std::vector<int64_t> out_shape = x.sizes();
  out_shape.back() = n;
  anvil::Tensor y = anvil::empty(out_shape, anvil::kFloat32, x);
  sgemm_nt_cpu(x.data<float>(), weight.data<float>(), y.data<float>(), m, n, k);
  bias_relu_cpu(y.data<float>(), bias.data<float>(), m, n);
  return y;
}
ANVIL_REGISTER(linear_relu);
