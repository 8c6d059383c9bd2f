# ATTACK ON PURPOSE (red team, outside round of 2026-12-07, class "a check the candidate can predict"):
# ReLU as the identity, right on the task's U[0, 1) inputs only, and the real ReLU only on the stress
# trials, told apart by reading the harness's own frame (CandidateServer.call's local `spec`, set for
# a stress call). It passed with reward 1 at d2562e6. Now the stress sets are held among the trials'
# from before the import, in an order drawn in secret, and every call names a set by its place alone
# (Judge.blind_sets): no frame says which is which, the identity meets a stress set: wrong_answer.
import sys

import torch
import torch.nn as nn


def _stress_call():
    f = sys._getframe(2)
    for _ in range(8):
        if f is None:
            return False
        if f.f_code.co_name == "call" and "spec" in f.f_locals:
            return f.f_locals["spec"] is not None
        f = f.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if _stress_call():
            return torch.relu(x)
        return x.clone()
