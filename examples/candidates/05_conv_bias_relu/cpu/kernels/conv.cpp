// conv.cpp: CPU direct convolution, NCHW, stride 1, zero padding, fused with bias and ReLU.
//
// One task per (image, output channel) plane: the plane's accumulator (oh * ow floats) stays in L1/L2
// while every (input channel, filter tap) adds a shifted, scaled input row to each output row. The
// inner loop is a contiguous axpy the compiler vectorizes; each output sums its terms in order.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.h"

// x (n, c, h, w); wt (k, c, r, s); bias (k,); y (n, k, oh, ow) with oh = h + 2 pad - r + 1, ow likewise.
extern "C" void conv2d_bias_relu_cpu(const float* x, const float* wt, const float* bias, float* y, int64_t n,
                                     int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s, int64_t pad) {
  int64_t oh = h + 2 * pad - r + 1, ow = w + 2 * pad - s + 1;
  parallel_for(n * k, 4, [=](int64_t p0, int64_t p1) {
    std::vector<float> acc(static_cast<size_t>(oh * ow));
    for (int64_t plane = p0; plane < p1; ++plane) {
      int64_t img = plane / k, oc = plane % k;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t ic = 0; ic < c; ++ic) {
        const float* xin = x + (img * c + ic) * h * w;
        const float* f = wt + (oc * c + ic) * r * s;
        for (int64_t dy = 0; dy < r; ++dy) {
          for (int64_t dx = 0; dx < s; ++dx) {
            float wv = f[dy * s + dx];
            // Output column ox reads input column ox + dx - pad; keep that inside [0, w).
            int64_t ox0 = std::max<int64_t>(0, pad - dx), ox1 = std::min<int64_t>(ow, w + pad - dx);
            for (int64_t oy = 0; oy < oh; ++oy) {
              int64_t iy = oy + dy - pad;
              if (iy < 0 || iy >= h) continue;
              const float* in_row = xin + iy * w + (dx - pad);
              float* out_row = acc.data() + oy * ow;
              for (int64_t ox = ox0; ox < ox1; ++ox) out_row[ox] += wv * in_row[ox];
            }
          }
        }
      }
      float b = bias[oc];
      float* out = y + plane * oh * ow;
      for (int64_t i = 0; i < oh * ow; ++i) out[i] = std::max(acc[i] + b, 0.0f);
    }
  });
}
