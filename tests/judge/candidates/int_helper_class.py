@EXT@
import torch.nn.functional as F


class _Fused:
    def __call__(self, t):
        return F.relu(t)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = _Fused()

    def forward(self, x):
        return self.op(x)
