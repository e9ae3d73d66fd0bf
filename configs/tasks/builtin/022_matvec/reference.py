import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product: A [M, K] times x [K, 1]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return torch.matmul(A, x)


M = 256
K = 512


def get_inputs():
    # scaled by K ** -0.5 so outputs are O(1): fp32 rounding stays far below the tolerance at large K
    return [torch.randn(M, K), torch.randn(K, 1) * K ** -0.5]


def get_init_inputs():
    return []
