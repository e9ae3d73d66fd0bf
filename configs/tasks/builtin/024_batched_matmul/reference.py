import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix product: [b, M, K] @ [b, K, N]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch = 4
M = 32
K = 48
N = 40


def get_inputs():
    # scaled by K ** -0.5 so outputs are O(1): fp32 rounding stays far below the tolerance at large K
    return [torch.randn(batch, M, K), torch.randn(batch, K, N) * K ** -0.5]


def get_init_inputs():
    return []
