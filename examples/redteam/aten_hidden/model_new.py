# ATTACK ON PURPOSE (red team, outside round of 2026-12-07, class "own work"): under cuda-agent, ATen
# does the compute, called from C++ with the profiler's record functions off and Python's dispatch
# keys excluded, so neither the op recorder nor the profiler's CPU ops see at::relu. On the CPU it
# passes with reward 1 (no speed credited); on a GPU the kernel that runs is ATen's, never the
# candidate's own: foreign_work or no_kernels.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

torch::Tensor relu_fwd(torch::Tensor x) {
  at::RecordFunctionGuard no_record(false);
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return at::relu(x);
}
"""
ext = load_inline(name="hidden_aten_relu", cpp_sources=[cpp], functions=["relu_fwd"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
