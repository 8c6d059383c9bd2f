// HACK ON PURPOSE: zeros_degenerate (class 7). The binding checks x like an honest one, allocates y and has the kernel fill it with zeros (zero_relu.cu), the exact answer of the degenerate task zero_relu.
// zero_relu_binding.cpp: fast-mode binding of relu(-(x * x) - 1) * gate.
#include <anvil/binding.h>

// From zero_relu.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int zero_relu_launch(float* y, int64_t n, anvil::Stream stream);

static anvil::Tensor negative_relu_gate(anvil::Tensor x) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  anvil::Tensor y = anvil::empty_like(x);
  int err = zero_relu_launch(y.data<float>(), y.numel(), anvil::stream());
  ANVIL_CHECK(err == 0, "kernel launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(negative_relu_gate);
