// HACK ON PURPOSE: nondeterministic_task (class 10), CPU variant: an honest binding of a fused gelu + dropout kernel; the task it is evaluated on (live_dropout.py) is the problem.
// gelu_dropout_binding.cpp: fast-mode binding of dropout(gelu(x), p, training=True) on the CPU.
#include <anvil/binding.h>

// From gelu_dropout.cpp.
extern "C" void gelu_dropout_cpu(const float* x, float* y, int64_t n, float p, uint64_t seed);

static anvil::Tensor gelu_dropout(anvil::Tensor x, double p, int64_t seed) {
  ANVIL_CHECK(x.is_cpu() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  ANVIL_CHECK(p >= 0.0 && p <= 1.0, "p must be in [0, 1], got ", p);
  anvil::Tensor y = anvil::empty_like(x);
  gelu_dropout_cpu(x.data<float>(), y.data<float>(), x.numel(), static_cast<float>(p), static_cast<uint64_t>(seed));
  return y;
}
ANVIL_REGISTER(gelu_dropout);
