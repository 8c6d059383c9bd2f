# ATTACK ON PURPOSE (red team, class "closed-form answer"): KernelBench's own public hack (branch
# bkal01/fix-level1-hacks, 94_MSELoss_analytical_hack.py): the loss's expectation for targets
# uniform on [0, 1), from one mean of the predictions, the first call exact. Within --preset paper's
# 1e-2 on the task's inputs; signed or rescaled inputs show it: wrong_answer.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, predictions, targets):
        self.calls += 1
        if self.calls == 1:
            return torch.mean((predictions - targets) ** 2)
        scale = 2.0 * torch.mean(predictions)
        return scale * scale / 3.0 - scale / 2.0 + 1.0 / 3.0
