// Model sources: resolve, identify, load (see dice/train/model_source.h).
#include "dice/train/model_source.h"

#include <sys/stat.h>
#include <torch/cuda.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dice/ckpt/checkpoint.h"
#include "dice/model/config.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/hash.h"
#include "dice/util/log.h"

namespace dice::train {
namespace stdfs = std::filesystem;

ModelSource resolve_model(const std::string& path, const std::string& flag) {
  DICE_REQUIRE(!path.empty(), flag, " is empty: pass an HF model folder, a checkpoint (step_N/) or a run folder.");
  DICE_REQUIRE(fs::exists(path), flag, " ", path, " does not exist (pass an HF model folder, a checkpoint or a run folder).");
  DICE_REQUIRE(stdfs::is_directory(path), flag, " ", path,
               " is a file; pass the folder that holds config.json and the weights.");
  ModelSource src;
  if (fs::exists(path + "/model.h5") || fs::exists(path + "/state.h5")) {
    auto problems = ckpt::check_checkpoint(path, /*verify=*/false);
    DICE_REQUIRE(problems.empty(), "the checkpoint ", path, " is not usable: ", problems.empty() ? "" : problems[0],
                 ". Pick a complete one (`dice ckpt info ", stdfs::path(path).parent_path().string(),
                 "` shows its latest complete one), or pass the run folder to use that.");
    src = {path, true};
  } else if (fs::exists(path + "/config.json")) {
    src = {path, false};
  } else {
    auto latest = ckpt::find_latest_complete(path);
    DICE_REQUIRE(latest.has_value(), flag, " ", path, " is neither a model folder (no config.json) nor a run folder ",
                 "with a complete checkpoint.");
    log::info("using the latest complete checkpoint ", *latest);
    src = {*latest, true};
  }
  DICE_REQUIRE(fs::exists(src.dir + "/config.json"), "the model folder ", src.dir, " has no config.json",
               src.is_checkpoint ? " (import checkpoints with `dice ckpt import-hf`, which copies it)." : ".");
  return src;
}

std::string model_identity(const ModelSource& src) {
  hash::Sha256 h;
  h.update(fs::read_file(src.dir + "/config.json"));
  if (fs::exists(src.dir + "/COMPLETE")) h.update(fs::read_file(src.dir + "/COMPLETE"));
  std::vector<std::string> files;
  for (const auto& e : stdfs::directory_iterator(src.dir)) {
    const std::string n = e.path().filename().string();
    const bool weights = n == "model.h5" || (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0);
    if (weights && e.is_regular_file()) files.push_back(n);
  }
  std::sort(files.begin(), files.end());
  constexpr int64_t kEdge = 64 << 10;
  std::vector<char> buf(kEdge);
  for (const auto& n : files) {
    const std::string p = src.dir + "/" + n;
    const int64_t size = static_cast<int64_t>(stdfs::file_size(p));
    h.update(n);
    h.update(std::to_string(size));
    std::ifstream in(p, std::ios::binary);
    for (int64_t at : {int64_t{0}, std::max<int64_t>(0, size - kEdge)}) {
      in.seekg(at);
      in.read(buf.data(), kEdge);
      h.update(buf.data(), static_cast<size_t>(in.gcount()));
      in.clear();
    }
  }
  return h.hex_digest();
}

model::NamedTensors load_weights(const ModelSource& src) {
  return src.is_checkpoint ? ckpt::load_model(src.dir) : model::load_safetensors(src.dir);
}

void load_into(model::Transformer& m, const model::NamedTensors& w, const std::string& source) {
  try {
    torch::NoGradGuard ng;
    m->load_weights(w);
  } catch (const Error& e) {
    throw Error(str("The weights in ", source, " do not fit the run's model (", m->config().num_hidden_layers,
                    " layers, hidden ", m->config().hidden_size, "): ", e.what(), " Is it a checkpoint of another model?"));
  }
}

model::Transformer load_policy(const ModelSource& src, torch::Dtype dtype, torch::Device device) {
  if (!src.is_checkpoint) return model::load_hf_model(src.dir, dtype, device);
  model::Transformer m(model::ModelConfig::from_hf_dir(src.dir), dtype, device);
  load_into(m, load_weights(src), src.dir);
  return m;
}

torch::Dtype default_dtype(torch::Device device) { return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32; }

torch::Device pick_device(const std::string& want, const dist::World* world, const std::string& flag) {
  const bool cuda = torch::cuda::is_available();
  const bool is_cuda = want == "cuda" || want.rfind("cuda:", 0) == 0;
  DICE_REQUIRE(want == "auto" || want == "cpu" || is_cuda, flag, " is '", want,
               "', but must be auto, cpu, cuda or cuda:N.");
  DICE_REQUIRE(!is_cuda || cuda, flag, " is '", want, "' but no CUDA device is visible; use cpu (or auto).");
  if (want == "cpu" || !cuda) return torch::kCPU;
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (want.rfind("cuda:", 0) == 0) {
    const std::string n = want.substr(5);
    DICE_REQUIRE(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos && std::stoll(n) < count, flag,
                 " is '", want, "', but the visible CUDA devices are 0..", count - 1, ".");
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoll(n)));
  }
  const int idx = world ? world->device_index(static_cast<int>(count)) : 0;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(idx));
}

torch::Dtype compute_dtype_for(const std::string& name, torch::Device device, torch::Dtype master) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  return device.is_cuda() ? torch::kBFloat16 : master;
}

}  // namespace dice::train
