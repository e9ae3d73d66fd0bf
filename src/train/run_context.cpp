// The setup `dice train` and `dice sft` share: see run_context.h.
#include "dice/train/run_context.h"

#include <filesystem>

#include "dice/ckpt/checkpoint.h"
#include "dice/ckpt/hf.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"

namespace dice::train {

RunContext::RunContext(const std::string& model, const std::string& device, const dist::World& world)
    : world_(world) {
  model_ = resolve_model(model, "model");
  side_files_ = ckpt::side_files_in(model_.dir);  // config, tokenizer, remote code (looked up once)
  mcfg_ = model::ModelConfig::from_hf_dir(model_.dir);
  tok_.emplace(text::Tokenizer::from_dir(model_.dir));
  text::check_compatible(*tok_, mcfg_.vocab_size, mcfg_.mask_token_id);
  device_ = pick_device(device, &world, "device");
}

void RunContext::plan(const std::string& out, const std::string& resume, const std::string& yaml,
                      bool (*affects_results)(const std::string& dotted_key), const run_dir::Fingerprint& inputs) {
  out_ = out;
  yaml_ = yaml;
  resume_from_ = plan_run_dir(out, resume, yaml, model_, world_, lock_, affects_results, inputs);
}

model::NamedTensors RunContext::start_weights() const {
  return resume_from_.empty() ? load_weights(model_) : ckpt::load_model(resume_from_);
}

void RunContext::open_outputs(int64_t step) {
  if (!world_.is_root()) return;
  std::filesystem::create_directories(out_);
  fs::write_file_atomic(out_ + "/config.yaml", yaml_);
  metrics_.open(out_, step);
  log::set_file(out_ + "/log.txt");  // rank 0's lines, timestamped
}

}  // namespace dice::train
