@EXT@

_act = torch.relu  # an alias at module level: invisible to a name-based static check


class ModelNew(nn.Module):
    def forward(self, x):
        return _act(x)
