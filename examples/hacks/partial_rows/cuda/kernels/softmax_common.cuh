// HACK ON PURPOSE: partial_rows (class 1): helper, unchanged from the honest candidate.
// softmax_common.cuh: what the two softmax kernels share: the chunking of a row and the
// (max, sum of exp) statistics with their merge rule.
//
// A row of `cols` floats is cut into chunks of kChunk floats; one block of kThreads threads owns a
// chunk, each thread kVec float4s of it. Splitting rows keeps the GPU full when rows are few and long.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace softmax {

constexpr int kThreads = 256;
constexpr int kVec = 4;  // float4s per thread
constexpr int kChunk = kThreads * kVec * 4;  // floats per block

// Running softmax statistics of a set of values: m = max, s = sum(exp(v - m)).
// The empty set is (-inf, 0).
struct Stats {
  float m;
  float s;
};

__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // both empty (avoids exp(-inf - -inf) = nan)
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ Stats warp_merge(Stats v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Stats o{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = merge(v, o);
  }
  return v;
}

// Merges one Stats per thread over the block; every thread gets the result.
__device__ __forceinline__ Stats block_merge(Stats v) {
  __shared__ Stats warp_stats[kThreads / 32];
  __shared__ Stats result;
  v = warp_merge(v);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_stats[warp] = v;
  __syncthreads();
  if (warp == 0) {
    Stats w = lane < kThreads / 32 ? warp_stats[lane] : Stats{-INFINITY, 0.0f};
    w = warp_merge(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

}  // namespace softmax
