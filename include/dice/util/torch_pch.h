#pragma once
// The precompiled LibTorch header shared by all torch-using targets (see cmake/DiceModule.cmake).
#include <torch/torch.h>
