// HACK ON PURPOSE: subsample_mean (class 8), CPU variant. An honest-looking binding for a loss kernel that only reads a strided 1/64 sample of its inputs (mse.cpp).
// mse_binding.cpp: fast-mode binding of mean((pred - target)^2) on the CPU.
#include <anvil/binding.h>

// From mse.cpp.
extern "C" float mse_cpu(const float* pred, const float* target, int64_t n);

static anvil::Tensor mse_loss(anvil::Tensor pred, anvil::Tensor target) {
  for (const anvil::Tensor* t : {&pred, &target}) {
    ANVIL_CHECK(t->is_cpu() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "pred and target must be contiguous float32 CPU tensors");
  }
  ANVIL_CHECK(pred.sizes() == target.sizes(), "pred and target must have the same shape");
  anvil::Tensor loss = anvil::empty({}, anvil::kFloat32, pred);  // a 0-d tensor, like torch.mean's
  *loss.data<float>() = mse_cpu(pred.data<float>(), target.data<float>(), pred.numel());
  return loss;
}
ANVIL_REGISTER(mse_loss);
