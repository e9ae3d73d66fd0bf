import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """One causal self-attention head with q/k/v/output projections (no biases)."""

    def __init__(self, dim, head_dim):
        super().__init__()
        self.q = nn.Linear(dim, head_dim, bias=False)
        self.k = nn.Linear(dim, head_dim, bias=False)
        self.v = nn.Linear(dim, head_dim, bias=False)
        self.o = nn.Linear(head_dim, dim, bias=False)

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.q(x), self.k(x), self.v(x)
        att = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        return self.o(torch.matmul(att, v))


batch_size = 2
seq_len = 16
dim = 32
head_dim = 16


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, head_dim]
