# mnist: LeNet-style classifier (two conv + max-pool + ReLU stages, two linear layers, log-softmax)
# on a batch of four 28x28 images. The CPU problem for the pattern of KernelBench's few-shot
# "mnist2" example (prompts/few_shot/model_ex_mnist2.py).
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))  # (n, 10, 12, 12)
        x = F.relu(F.max_pool2d(self.conv2(x), 2))  # (n, 20, 4, 4)
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def get_inputs():
    return [torch.randn(4, 1, 28, 28)]


def get_init_inputs():
    return []
