// scale_shift.cpp: a starter kernel from `anvil init` on a machine without a GPU (replace it):
// y = x * a + b on the CPU. It builds and is right for any float32 tensor: a first kernel to edit.
#include <cstdint>

// `config`: the launch configuration (the GPU starter's threads per block); one loop here.
extern "C" void scale_shift_cpu(const float* x, float* y, int64_t n, float a, float b, int config) {
  (void)config;
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}
