"""Honest CUDA solution for builtin task 015_col_sum: real __global__ kernels built with load_inline."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <vector>

// One thread per column: consecutive threads read consecutive addresses of each row.
__global__ void col_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double acc = 0.0;  // thousands of rows summed one by one: keep the rounding error small
  for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + c];
  y[c] = (float)acc;
}

torch::Tensor col_sum_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "col_sum: expected a 2-D CUDA tensor");
  auto xc = x.contiguous();
  const int64_t rows = xc.size(0), cols = xc.size(1);
  auto y = torch::empty({cols}, xc.options());
  const int threads = 256;
  if (cols > 0) {
    col_sum_kernel<<<(unsigned)((cols + threads - 1) / threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

cpp_source = r"""
torch::Tensor col_sum_forward(torch::Tensor x);
"""

ext = load_inline(
    name="dice_builtin_015_col_sum_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['col_sum_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.col_sum_forward(x)
