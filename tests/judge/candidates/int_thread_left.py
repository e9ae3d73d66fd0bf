@EXT@
import threading
import time


class ModelNew(nn.Module):
    """Correct, but leaves a Python thread running after forward returns."""

    def forward(self, x):
        threading.Thread(target=lambda: time.sleep(30), daemon=True).start()
        return ext.relu_ok(x)
