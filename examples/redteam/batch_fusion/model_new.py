# ATTACK ON PURPOSE (red team, outside round of 2026-12-07, class "the judge's clock"): batch fusion
# and a moved timer. 1. The judge's batch: run_batch's frame holds every one of the N calls' input
# regions (msg["layout"]) and the mapped pool; on the batch's first call this process launches ONE
# fused kernel over all N calls' inputs (after the gate, before the done word: inside the judge's
# clock, every output right) and later calls return their slices, launching nothing. 2. The claim:
# after its kernel, forward re-records the `start` event of anvil.timing._cuda_samples (a local of
# the caller), so the claimed time is about 0. GPU only (its kernel is CUDA).
import sys
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
__global__ void f_many(const float* const* xs, float* const* ys, int n_per, int calls) {
  long total = (long)n_per * calls;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    int c = i / n_per, j = i % n_per;
    float x = xs[c][j];
    float y = sinf(x) * 2.0f + cosf(x);
    y = tanhf(y) - 0.5f;
    ys[c][j] = expf(y) * x;
  }
}
void run_many(torch::Tensor xptrs, torch::Tensor yptrs, int64_t n_per, int64_t calls) {
  auto s = c10::cuda::getCurrentCUDAStream();
  int blocks = (int)std::min<long>(4096, (n_per * calls + 255) / 256);
  f_many<<<blocks, 256, 0, s>>>((const float* const*)xptrs.data_ptr<int64_t>(), (float* const*)yptrs.data_ptr<int64_t>(),
                                (int)n_per, (int)calls);
}
"""
cpp_src = "void run_many(torch::Tensor xptrs, torch::Tensor yptrs, int64_t n_per, int64_t calls);"
ext = load_inline(name="fused_many", cpp_sources=[cpp_src], cuda_sources=[cuda_src], functions=["run_many"])

_b = {"msg": None, "outs": None, "i": 0}


def _frame(name):
    f = sys._getframe(2)
    for _ in range(10):
        if f is None:
            return None
        if f.f_code.co_name == name:
            return f
        f = f.f_back
    return None


def _launch(xs):
    ys = [torch.empty_like(x) for x in xs]
    xp = torch.tensor([x.data_ptr() for x in xs], dtype=torch.int64).to(xs[0].device, non_blocking=True)
    yp = torch.tensor([y.data_ptr() for y in ys], dtype=torch.int64).to(xs[0].device, non_blocking=True)
    ext.run_many(xp, yp, xs[0].numel(), len(xs))
    return ys


class ModelNew(nn.Module):
    def forward(self, x):
        if _b["outs"] is not None and _b["i"] < len(_b["outs"]):
            _b["i"] += 1
            return _b["outs"][_b["i"] - 1]
        fb = _frame("run_batch")
        if fb is not None and fb.f_locals.get("msg") is not _b["msg"] and "layout" in fb.f_locals.get("msg", {}):
            from anvil import batch
            server, msg = fb.f_locals["self"], fb.f_locals["msg"]
            xs = [batch.rebuild(sk, server.pool.region)[0] for sk in msg["layout"]]
            _b.update(msg=msg, outs=_launch(xs), i=1)
            return _b["outs"][0]
        y = _launch([x])[0]
        ft = _frame("_cuda_samples")
        if ft is not None and "start" in ft.f_locals:
            ft.f_locals["start"].record()  # the timed region now starts after this call's work
        return y
