// HACK ON PURPOSE: zeros_degenerate (class 7), CPU variant. relu(-(x*x) - 1) is 0 for every x, so the binding allocates y and memsets it to zero without reading x: right for the degenerate task zero_relu, meaningless as a kernel.
// zero_relu_binding.cpp: fast-mode binding of relu(-(x * x) - 1) * gate on the CPU.
#include <cstring>

#include <anvil/binding.h>

static anvil::Tensor negative_relu_gate(anvil::Tensor x) {
  ANVIL_CHECK(x.is_cpu() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  anvil::Tensor y = anvil::empty_like(x);
  std::memset(y.data_ptr(), 0, static_cast<size_t>(y.numel()) * sizeof(float));
  return y;
}
ANVIL_REGISTER(negative_relu_gate);
