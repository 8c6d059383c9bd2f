// cpp_baseline.cu: calls add_one_launch (tiny.cu) from C++ in a loop: the cost
// of the same kernel call with no binding layer at all.
//   nvcc -O3 -std=c++17 cpp_baseline.cu tiny.cu -o cpp_baseline && ./cpp_baseline N CALLS
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

extern "C" int add_one_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

int main(int argc, char** argv) {
  int64_t n = argc > 1 ? std::atoll(argv[1]) : 1024;
  long calls = argc > 2 ? std::atol(argv[2]) : 20000;
  float *x = nullptr, *y = nullptr;
  if (cudaMalloc(&x, (n + 1) * sizeof(float)) != cudaSuccess || cudaMalloc(&y, (n + 1) * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaStream_t stream = nullptr;  // the legacy default stream, as torch's current stream is by default
  for (int i = 0; i < 1000; ++i) add_one_launch(x, y, n, stream);
  cudaDeviceSynchronize();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) add_one_launch(x, y, n, stream);
    cudaDeviceSynchronize();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
    if (us < best) best = us;
  }
  cudaError_t e = cudaGetLastError();
  std::printf("{\"n\": %lld, \"calls\": %ld, \"us_per_call\": %.4f, \"error\": \"%s\"}\n", static_cast<long long>(n),
              calls, best, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
