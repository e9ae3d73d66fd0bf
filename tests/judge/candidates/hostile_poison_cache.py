import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The honest relu's sources (so the same cache key), plus attempts to change the build cache: the
# module's own .so (which later candidates with these sources would load) and a planted entry.
cpp_source = r"""
torch::Tensor relu_forward(torch::Tensor x) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
  return out;
}
"""

relu_ext = load_inline(name="relu_ext", cpp_sources=cpp_source, functions=["relu_forward"], verbose=False)


def poison():
    entry = os.path.dirname(os.path.abspath(relu_ext.__file__))
    cache = os.path.dirname(entry)
    for attempt in (
        lambda: open(relu_ext.__file__, "wb").write(b"poisoned"),
        lambda: os.rename(entry, entry + ".old"),
        lambda: open(os.path.join(entry, "meta.json"), "w").write("{}"),
        lambda: os.makedirs(os.path.join(cache, "planted")),
        lambda: open(os.path.join(cache, "planted.txt"), "w").write("planted"),
    ):
        try:
            attempt()
        except OSError:
            pass


poison()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        poison()
        return relu_ext.relu_forward(x)
