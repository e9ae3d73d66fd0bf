@EXT@
import os
import sys

# Tries to reach the NEXT candidate: files in its scratch and the shared temp dirs, a rebound
# comparison, a thread that lives on, a line on stderr. Its own answer is wrong.
for d in [os.getcwd(), os.environ.get("TMPDIR", "/tmp"), "/tmp", "/dev/shm", "/var/tmp"]:
    try:
        with open(os.path.join(d, "dice_poison.txt"), "w") as fh:
            fh.write("poison")
    except OSError:
        pass
for mod in list(sys.modules.values()):
    try:
        if hasattr(mod, "compare") and hasattr(mod, "Caller"):
            mod.compare = lambda out, ref, atol, rtol: 0.0
    except Exception:  # noqa: BLE001 -- lazy modules raise on attribute access
        pass
torch.allclose = lambda *a, **k: True
sys.stderr.write("POISON-STDERR\n")
sys.stderr.flush()


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.noop(x) * 0
