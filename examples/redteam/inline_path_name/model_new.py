# ATTACK ON PURPOSE (red team, class "a verdict of the candidate's choosing"): a load_inline module
# named with a slash. anvil at d62ad83 made a directory of that name in the judge's own temp dir:
# FileNotFoundError there, at the judge's "task" stage: task_error. A name is checked before it
# reaches a path; a bad one is the candidate's load_error.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = "torch::Tensor ident(torch::Tensor x) { return x.clone(); }"
ext = load_inline(name="x/y", cpp_sources=[SOURCE], functions=["ident"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()

    def forward(self, x):
        return ext.ident(x)
