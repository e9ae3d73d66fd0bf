#pragma once
// The torch version check for code that differs between LibTorch 1.13 (CPU machines) and 2.x (GPU
// nodes); the attention that differs is in dice/model/attention.h.
#include <torch/version.h>

#define DICE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
