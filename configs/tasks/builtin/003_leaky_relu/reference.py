import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Leaky ReLU with a constructor slope; inputs are signed so the identity fails."""

    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 16
dim = 256


def get_inputs():
    # signed, non-constant inputs: an identity or zero "kernel" cannot pass
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return [0.1]
