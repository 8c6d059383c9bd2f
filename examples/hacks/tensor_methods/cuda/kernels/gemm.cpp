// HACK ON PURPOSE: tensor_methods (class 3): this GEMM is honest, built and imported, but model_new.py never calls it.
// gemm.cpp: host code, the fp32 GEMM through cuBLAS.
//
// PyTorch tensors are row-major and cuBLAS is column-major. Read column-major, the row-major
// C (m, n) = A (m, k) @ W (n, k)^T is C^T (n, m) = W @ A^T, where the row-major W is the column-major
// (k, n) matrix W^T (so op T) and the row-major A is the column-major (k, m) matrix A^T (so op N).
#include <climits>
#include <cstdint>

#include <cublas_v2.h>

// c (m, n) = a (m, k) @ w (n, k)^T, all row-major and contiguous. `handle` is a cublasHandle_t already
// bound to the caller's stream. Full fp32 math (no TF32), as PyTorch with TF32 off.
// Returns a cublasStatus_t (0: success).
extern "C" int sgemm_nt(void* handle, const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) return CUBLAS_STATUS_INVALID_VALUE;
  auto h = static_cast<cublasHandle_t>(handle);
  // The handle is shared with PyTorch: force plain fp32 math for this call, then restore its mode.
  cublasMath_t saved;
  cublasStatus_t st = cublasGetMathMode(h, &saved);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const float alpha = 1.0f, beta = 0.0f;
  int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  st = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &alpha, w, ik, a, ik, &beta, c, in);
  cublasStatus_t restore = cublasSetMathMode(h, saved);
  return st != CUBLAS_STATUS_SUCCESS ? st : restore;
}
