import time

import torch
import torch.nn as nn


class Model(nn.Module):
    """relu whose reference takes 20 ms per call: an honest kernel looks implausibly fast."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(0.02)
        return torch.relu(x)


N = 1003


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
