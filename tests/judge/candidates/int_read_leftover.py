@EXT@
import os


class ModelNew(nn.Module):
    """Correct only if a file that an earlier candidate left behind is visible."""

    def forward(self, x):
        for d in [os.getcwd(), os.environ.get("TMPDIR", "/tmp"), "/tmp", "/dev/shm", "/var/tmp"]:
            if os.path.exists(os.path.join(d, "dice_poison.txt")):
                return ext.relu_ok(x)
        return torch.zeros_like(x)
