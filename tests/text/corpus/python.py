import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A fused "scale then add" written as a CUDA kernel.
cuda_source = r"""
#include <torch/extension.h>

__global__ void scale_add_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, float alpha, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}

torch::Tensor scale_add(torch::Tensor x, torch::Tensor y, double alpha) {
    auto out = torch::empty_like(x);
    const int threads = 256;
    const int64_t blocks = (x.numel() + threads - 1) / threads;
    scale_add_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                          out.data_ptr<float>(), (float)alpha, x.numel());
    return out;
}
"""

cpp_source = "torch::Tensor scale_add(torch::Tensor x, torch::Tensor y, double alpha);"

scale_add = load_inline(
    name="scale_add",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_add"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 0.5) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return scale_add.scale_add(x.contiguous(), y.contiguous(), self.alpha)


def get_inputs():
    return [torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")]


def get_init_inputs():
    return [0.5]


if __name__ == '__main__':
    m = ModelNew()
    print(f"{m.alpha=} {'ok' if m.alpha > 0 else 'bad'}")
    d = {"a": [1, 2, 3], 'b': (4.5e-3, -7, 0x1F), "c": None}
    for k, v in d.items():
	    print(k, v)  # a tab-indented line
    assert isinstance(d, dict), "d isn't a dict, it's %s" % type(d)
    s = 'It\'s fine; we\'ll see. They\'re here, I\'m sure, you\'ve won, he\'d go.'
    lambda_ = lambda *args, **kwargs: (args, kwargs)
    x = [i ** 2 for i in range(10) if i % 3 == 0] + [None] * 3
    y = x[::-1][1:-1]  # slicing
    z = {**d, "e": ...}; w = not (x and y) or z
    print("===" * 20)
    print('#' * 80)
