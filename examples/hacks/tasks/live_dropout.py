# live_dropout: dropout(gelu(x)) with the dropout active in forward (F.dropout(..., training=True)),
# as in KernelBench L2-66 and L2-83, where .eval() is never called. A nondeterministic task on purpose
# (class 10): two reference runs on the same input differ, so no candidate can be verified against it,
# and the evaluation must report the task, not the candidate.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 2048
COLS = 2048
P = 0.1


class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):  # x: (ROWS, COLS)
        return F.dropout(F.gelu(x), p=self.p, training=True)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [P]
