# ATTACK ON PURPOSE (red team, class "partial computation"): KernelBench's own public hack
# (branch bkal01/fix-level1-hacks, 94_MSELoss_partial_computation_hack.py) made harder to see: the
# first call is exact, every later one the loss over every 2nd element, within --preset paper's 1e-2
# on the task's inputs. Inputs the task never makes (a few spikes, heavy tails) show it: wrong_answer.
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
        p, t = predictions.flatten(), targets.flatten()
        return torch.mean((p[::2] - t[::2]) ** 2)
