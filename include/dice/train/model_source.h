#pragma once
// Where a run's model comes from, shared by `dice eval`, `dice sample` and `dice train`:
//   resolve_model: an HF folder (config.json + safetensors), a dice checkpoint (step_N/ with
//                  model.h5 and its COMPLETE marker) or a run folder (its latest complete
//                  checkpoint); a checkpoint without COMPLETE is refused with a sentence.
//   model_identity: a digest that changes when the weights or the config change (the run
//                  directory fingerprint's "checkpoint" key).
//   load_weights / load_into / load_policy: the weights, as tensors or in a model.
//   pick_device:   auto | cpu | cuda | cuda:N, refused with a sentence when unavailable.
#include <torch/torch.h>

#include <string>

#include "dice/dist/world.h"
#include "dice/model/safetensors.h"
#include "dice/model/transformer.h"

namespace dice::train {

struct ModelSource {
  std::string dir;            // the folder holding config.json and the weights
  bool is_checkpoint = false;  // model.h5 (dice checkpoint) rather than safetensors
};

// `flag` names the option in messages (e.g. "--checkpoint", "--model", "model").
ModelSource resolve_model(const std::string& path, const std::string& flag);
// Digest of config.json, the COMPLETE marker and each weight file's name, size and first and last
// 64 KiB: cheap for an 8B model, and any re-save, re-export or other checkpoint changes it.
std::string model_identity(const ModelSource& src);
model::NamedTensors load_weights(const ModelSource& src);
// Loads weights into a model, turning a shape mismatch into a sentence naming the source.
void load_into(model::Transformer& m, const model::NamedTensors& w, const std::string& source);
model::Transformer load_policy(const ModelSource& src, torch::Dtype dtype, torch::Device device);
// The dtype used when none is asked for: bf16 on CUDA, fp32 on the CPU.
torch::Dtype default_dtype(torch::Device device);
// A learner's forward/backward dtype from its config value: float32 | bfloat16 | auto (bf16 on
// CUDA, else the master weights' dtype).
torch::Dtype compute_dtype_for(const std::string& name, torch::Device device, torch::Dtype master);
// want: auto | cpu | cuda | cuda:N. With a world, cuda/auto pick this rank's local GPU.
torch::Device pick_device(const std::string& want, const dist::World* world, const std::string& flag);

}  // namespace dice::train
