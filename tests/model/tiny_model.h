#pragma once
// The tiny fp32 CPU model the model tests share: random weights from `seed`, norm weights drawn
// from [0.5, 1.5] so that a mixed-up norm would show.
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "dice/model/transformer.h"

namespace dice::model::testing {

inline Transformer tiny_model(uint64_t seed = 11) {
  auto cfg = ModelConfig::preset("tiny");
  Transformer m(cfg, torch::kFloat32, torch::kCPU);
  m->load_weights(init_random_weights(cfg, seed, torch::kFloat32));
  torch::NoGradGuard g;
  for (auto& p : m->named_parameters()) {
    if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.5, 1.5);
  }
  return m;
}

}  // namespace dice::model::testing
