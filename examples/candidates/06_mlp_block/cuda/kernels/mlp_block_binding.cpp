// mlp_block_binding.cpp: fast-mode binding of x + fc2(gelu(fc1(layer_norm(x)))):
// LayerNorm kernel -> cuBLAS GEMM -> bias + GELU epilogue -> cuBLAS GEMM -> bias + residual epilogue.
#include <anvil/binding.h>

// From layernorm.cu and epilogues.cu: return a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int layernorm_launch(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                                int64_t cols, float eps, anvil::Stream stream);
extern "C" int bias_gelu_launch(float* y, const float* bias, int64_t rows, int64_t cols, anvil::Stream stream);
extern "C" int bias_residual_launch(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols,
                                    anvil::Stream stream);
// From gemm.cpp: returns a cublasStatus_t (0: success).
extern "C" int sgemm_nt(void* handle, const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);

static void check_param(const anvil::Tensor& t, std::vector<int64_t> shape, const char* name) {
  ANVIL_CHECK(t.is_cuda() && t.is_contiguous() && t.dtype() == anvil::kFloat32 && t.sizes() == shape, name,
              " must be a contiguous float32 CUDA tensor of the expected shape");
}

// x: (..., hidden). ln_w, ln_b: (hidden,); w1: (ffn, hidden), b1: (ffn,); w2: (hidden, ffn), b2: (hidden,).
static anvil::Tensor mlp_block(anvil::Tensor x, anvil::Tensor ln_w, anvil::Tensor ln_b, double eps, anvil::Tensor w1,
                               anvil::Tensor b1, anvil::Tensor w2, anvil::Tensor b2) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32 && x.dim() >= 1,
              "x must be a contiguous float32 CUDA tensor");
  ANVIL_CHECK(w1.dim() == 2, "fc1 weight must be 2-d");
  int64_t hidden = x.size(-1), ffn = w1.size(0), rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  check_param(ln_w, {hidden}, "norm weight");
  check_param(ln_b, {hidden}, "norm bias");
  check_param(w1, {ffn, hidden}, "fc1 weight");
  check_param(b1, {ffn}, "fc1 bias");
  check_param(w2, {hidden, ffn}, "fc2 weight");
  check_param(b2, {hidden}, "fc2 bias");
  ANVIL_CHECK(hidden % 4 == 0 && ffn % 4 == 0, "hidden and ffn sizes must be multiples of 4");
  void* blas = anvil::cublas_handle();
  ANVIL_CHECK(blas != nullptr, "no cuBLAS handle");
  anvil::Stream stream = anvil::stream();

  anvil::Tensor normed = anvil::empty({rows, hidden}, anvil::kFloat32, x);
  anvil::Tensor h = anvil::empty({rows, ffn}, anvil::kFloat32, x);
  anvil::Tensor y = anvil::empty_like(x);
  int err = layernorm_launch(x.data<float>(), ln_w.data<float>(), ln_b.data<float>(), normed.data<float>(), rows,
                             hidden, static_cast<float>(eps), stream);
  ANVIL_CHECK(err == 0, "layernorm launch failed with CUDA error ", err);
  int st = sgemm_nt(blas, normed.data<float>(), w1.data<float>(), h.data<float>(), rows, ffn, hidden);
  ANVIL_CHECK(st == 0, "fc1: cublasSgemm failed with status ", st);
  err = bias_gelu_launch(h.data<float>(), b1.data<float>(), rows, ffn, stream);
  ANVIL_CHECK(err == 0, "bias_gelu launch failed with CUDA error ", err);
  st = sgemm_nt(blas, h.data<float>(), w2.data<float>(), y.data<float>(), rows, hidden, ffn);
  ANVIL_CHECK(st == 0, "fc2: cublasSgemm failed with status ", st);
  err = bias_residual_launch(y.data<float>(), b2.data<float>(), x.data<float>(), rows, hidden, stream);
  ANVIL_CHECK(err == 0, "bias_residual launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(mlp_block);
