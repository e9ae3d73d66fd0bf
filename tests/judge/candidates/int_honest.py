@EXT@


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_ok(x)
