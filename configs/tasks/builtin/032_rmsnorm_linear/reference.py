import torch
import torch.nn as nn


class Model(nn.Module):
    """Pre-norm projection: RMSNorm (learned weight, eps 1e-6) then a linear layer."""

    def __init__(self, dim, out_features):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.randn(dim))
        self.proj = nn.Linear(dim, out_features)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.norm_weight
        return self.proj(h)


batch_size = 32
dim = 128
out_features = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, out_features]
