# ATTACK ON PURPOSE (red team, class "orphans"): fork, setsid, and leave a process that outlives the
# evaluation (a `sleep 317.2113`, to be found by its command line). At c44fc9a it survived only
# with --no-defenses (the defended runner's subreaper took it); the check keeps it that way.
import os

import torch
import torch.nn as nn

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "317.2113"])
    os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.zeros_like(x)
