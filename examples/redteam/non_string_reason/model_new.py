# ATTACK ON PURPOSE (red team, class "schema breaking"): the candidate's process finds its own server
# object (anvil.candidate.CandidateServer) and says of itself "fail, wrong_answer" with a `reason` that
# is an object, not a name. The -1 held at d62ad83, but the object was copied into the result's
# `reason`, a value no consumer of anvil.eval/1 expects. Only a reason of the outcome's own
# (src/anvil/env/outcome.h) may pass.
import gc
import os

import torch
import torch.nn as nn

import anvil.candidate as C

SRV = next(o for o in gc.get_objects() if isinstance(o, C.CandidateServer))


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.lo, self.hi = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.clamp(torch.nn.functional.gelu(x * self.scale + self.bias), self.lo, self.hi)


SRV.send({"type": "fail", "outcome": "wrong_answer", "reason": {"nested": [1, {"x": None}]}, "message": "m"})
os._exit(0)
