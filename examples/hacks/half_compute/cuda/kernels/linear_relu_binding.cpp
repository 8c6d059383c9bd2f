// HACK ON PURPOSE: half_compute (class 6). The binding of a GEMM that rounds its fp32 operands to fp16 inside the kernel (gemm_half.cu); the output is fp32, so nothing at the interface shows the precision drop.
// linear_relu_binding.cpp: fast-mode binding of relu(x @ W^T + b) on tensor cores.
#include <anvil/binding.h>

// From gemm_half.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int linear_relu_half_launch(const float* x, const float* w, const float* bias, float* y, int64_t m,
                                       int64_t n, int64_t k, anvil::Stream stream);

static anvil::Tensor linear_relu(anvil::Tensor x, anvil::Tensor weight, anvil::Tensor bias) {
  for (const anvil::Tensor* t : {&x, &weight, &bias}) {
    ANVIL_CHECK(t->is_cuda() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "x, weight and bias must be contiguous float32 CUDA tensors");
  }
  ANVIL_CHECK(weight.dim() == 2 && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "weight must be (out, in) and bias (out,)");
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "x's last dimension must be ", weight.size(1));
  int64_t k = weight.size(1), n = weight.size(0), m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  std::vector<int64_t> out_shape = x.sizes();
  out_shape.back() = n;
  anvil::Tensor y = anvil::empty(out_shape, anvil::kFloat32, x);
  int err = linear_relu_half_launch(x.data<float>(), weight.data<float>(), bias.data<float>(), y.data<float>(), m, n,
                                    k, anvil::stream());
  ANVIL_CHECK(err == 0, "linear_relu_half launch failed with CUDA error ", err,
              " (m, n must be multiples of 64 and k of 32)");
  return y;
}
ANVIL_REGISTER(linear_relu);
