import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Exact (erf) GELU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


batch_size = 16
dim = 256


def get_inputs():
    # signed, non-constant inputs: an identity or zero "kernel" cannot pass
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
