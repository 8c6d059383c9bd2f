# HACK ON PURPOSE: nondeterministic_task (class 10). The candidate is honest: gelu then inverted dropout (keep with probability 1 - p, scale by 1 / (1 - p)) in one kernel, with a counter-based hash RNG reseeded on every call, as a real fused dropout is. The attack is the task (examples/hacks/tasks/live_dropout.py): its dropout stays live in forward, so the reference disagrees with itself and verification means nothing; the evaluation must blame the task (task_error), not reward or punish the candidate.
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """dropout(gelu(x), p, training=True) as one fused kernel with a counter-based RNG."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        seed = int(torch.randint(0, 2**62, (1,)).item())  # from torch's generator, like F.dropout
        return cuda_extension.gelu_dropout(x.contiguous(), self.p, seed)
