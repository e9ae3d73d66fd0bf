@EXT@


class ModelNew(nn.Module):
    """Wrong: returns its input (negative values are not zeroed)."""

    def forward(self, x):
        return ext.noop(x).clone()
