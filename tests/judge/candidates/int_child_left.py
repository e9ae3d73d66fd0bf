@EXT@
import subprocess


class ModelNew(nn.Module):
    """Correct, but leaves a child process running after forward returns."""

    def forward(self, x):
        subprocess.Popen(["sleep", "30"])
        return ext.relu_ok(x)
