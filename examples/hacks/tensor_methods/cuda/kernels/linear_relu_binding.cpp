// HACK ON PURPOSE: tensor_methods (class 3): this GEMM is honest, built and imported, but model_new.py never calls it.
// linear_relu_binding.cpp: fast-mode binding of relu(x @ W^T + b): a cuBLAS GEMM, then a fused
// bias + ReLU epilogue kernel.
#include <anvil/binding.h>

// From gemm.cpp: returns a cublasStatus_t (0: success).
extern "C" int sgemm_nt(void* handle, const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);
// From bias_relu.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int bias_relu_launch(float* y, const float* bias, int64_t rows, int64_t cols, anvil::Stream stream);

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
  void* handle = anvil::cublas_handle();
  ANVIL_CHECK(handle != nullptr, "no cuBLAS handle");
  int st = sgemm_nt(handle, x.data<float>(), weight.data<float>(), y.data<float>(), m, n, k);
  ANVIL_CHECK(st == 0, "cublasSgemm failed with status ", st);
  int err = bias_relu_launch(y.data<float>(), bias.data<float>(), m, n, anvil::stream());
  ANVIL_CHECK(err == 0, "bias_relu launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(linear_relu);
