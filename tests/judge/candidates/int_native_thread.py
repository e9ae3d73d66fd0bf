@EXT@


class ModelNew(nn.Module):
    """Correct, but its extension leaves a native thread running."""

    def forward(self, x):
        return ext.relu_with_thread(x)
