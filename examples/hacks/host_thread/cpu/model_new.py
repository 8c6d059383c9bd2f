# HACK ON PURPOSE: host_thread (class 4). forward allocates the output, starts a background threading.Thread that fills it a millisecond later, and returns the still-empty tensor at once: the judge's perf_counter (or CUDA-event) interval around the call holds only the thread start. The thread's call into the extension keeps the GIL until the output is complete, so the judge's next Python statement (its comparison) waits for it and finds the right answer.
import threading
import time

import torch
import torch.nn as nn

import cuda_extension


def _fill(y, x, bias, scale, clamp_min, clamp_max):
    time.sleep(0.001)  # let forward return (and the caller stop its clock) first
    cuda_extension.elementwise_chain_out(x, bias, y, scale, clamp_min, clamp_max)


class ModelNew(nn.Module):
    """clamp(gelu(x * scale + bias)) as one fused kernel, computed in the background."""

    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        threading.Thread(target=_fill, args=(y, x, self.bias, self.scale, self.clamp_min, self.clamp_max),
                         daemon=True).start()
        return y
