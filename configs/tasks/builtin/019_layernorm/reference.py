import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Layer normalization over the last dimension with learned weight and bias (eps 1e-5)."""

    def __init__(self, dim):
        super().__init__()
        # signed, non-trivial affine parameters: a kernel that ignores them fails
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, eps=1e-5)


batch_size = 16
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0 + 0.5]


def get_init_inputs():
    return [dim]
