@EXT@
import sys

# Rebinds the harness's comparison and timing in this process, as a candidate could in the old
# one-process executor: everything "passes" and every call takes a microsecond.
for mod in list(sys.modules.values()):
    try:
        target = hasattr(mod, "compare") and hasattr(mod, "Caller")
    except Exception:  # noqa: BLE001 -- lazy modules raise on attribute access
        target = False
    if target:
        try:  # torch's op namespaces answer hasattr for any name (torch 2.11): only the harness has Caller.call
            real_call = mod.Caller.call
        except Exception:  # noqa: BLE001
            continue
        mod.compare = lambda out, ref, atol, rtol: 0.0
        mod.same_bits = lambda a, b: True

        def fast(self, model, inputs, *args, real_call=real_call, **kwargs):
            out, ms, ev = real_call(self, model, inputs, *args, **kwargs)
            return out, 0.001, ev
        mod.Caller.call = fast
torch.allclose = lambda *a, **k: True


class ModelNew(nn.Module):
    def forward(self, x):
        ext.noop(x)
        return torch.zeros_like(x)
