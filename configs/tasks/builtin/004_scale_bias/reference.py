import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Affine map y = x * scale + bias with scalar constructor arguments."""

    def __init__(self, scale, bias):
        super().__init__()
        self.scale = scale
        self.bias = bias

    def forward(self, x):
        return x * self.scale + self.bias


batch_size = 16
dim = 256


def get_inputs():
    # signed, non-constant inputs: an identity or zero "kernel" cannot pass
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return [1.75, -0.5]
