import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SiLU / swish: x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)


batch_size = 16
dim = 256


def get_inputs():
    # signed, non-constant inputs: an identity or zero "kernel" cannot pass
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
