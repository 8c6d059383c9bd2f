# ATTACK ON PURPOSE (red team, class "every door bounded"): at import, take 6 GiB of the host's memory
# (touched, so it is resident) and hold it through the whole evaluation: on a host that judges many
# evaluations at once, its neighbours run out. anvil at d62ad83 let it (the whole evaluation's 64 GiB
# limit only). The candidate's process gets a limit of its own (RLIMIT_DATA): the allocation fails,
# the candidate's load_error, its memory never taken.
import torch
import torch.nn as nn
import torch.nn.functional as F

HOARD = torch.ones(6 << 28)  # 6 GiB of float32, written


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
