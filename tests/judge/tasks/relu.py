import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


N = 1003  # not a multiple of 4: a kernel that skips the tail is caught


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
