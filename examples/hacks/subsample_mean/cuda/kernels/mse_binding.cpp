// HACK ON PURPOSE: subsample_mean (class 8). An honest-looking binding for a loss kernel that only reads a strided 1/64 sample of its inputs (mse.cu).
// mse_binding.cpp: fast-mode binding of mean((pred - target)^2).
#include <anvil/binding.h>

// From mse.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int mse_launch(const float* pred, const float* target, float* loss, int64_t n, anvil::Stream stream);

static anvil::Tensor mse_loss(anvil::Tensor pred, anvil::Tensor target) {
  for (const anvil::Tensor* t : {&pred, &target}) {
    ANVIL_CHECK(t->is_cuda() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "pred and target must be contiguous float32 CUDA tensors");
  }
  ANVIL_CHECK(pred.sizes() == target.sizes(), "pred and target must have the same shape");
  anvil::Tensor loss = anvil::empty({}, anvil::kFloat32, pred);  // a 0-d tensor, like torch.mean's
  int err = mse_launch(pred.data<float>(), target.data<float>(), loss.data<float>(), pred.numel(), anvil::stream());
  ANVIL_CHECK(err == 0, "mse launch failed with CUDA error ", err);
  return loss;
}
ANVIL_REGISTER(mse_loss);
