import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Maximum over the last dimension (values only)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.max(x, dim=1).values


batch_size = 16
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0 + 0.5]


def get_init_inputs():
    return []
