import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU feed-forward block (as in Llama / Qwen): down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)
        self.down = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


batch_size = 32
dim = 64
hidden_dim = 128


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden_dim]
