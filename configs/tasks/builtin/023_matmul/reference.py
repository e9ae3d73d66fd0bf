import torch
import torch.nn as nn


class Model(nn.Module):
    """Dense matrix product C = A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 64
K = 96
N = 128


def get_inputs():
    # scaled by K ** -0.5 so outputs are O(1): fp32 rounding stays far below the tolerance at large K
    return [torch.randn(M, K), torch.randn(K, N) * K ** -0.5]


def get_init_inputs():
    return []
