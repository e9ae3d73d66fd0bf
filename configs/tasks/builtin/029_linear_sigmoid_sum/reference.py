import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, sigmoid, then a sum over features (keepdim)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.sum(torch.sigmoid(self.linear(x)), dim=1, keepdim=True)


batch_size = 32
in_features = 128
out_features = 64


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
