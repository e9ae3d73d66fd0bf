// `dice forward`: run the model on a case file and write the logits (debugging, parity checks).
//   dice/model/config.h        ModelConfig, presets, random weights
//   dice/model/masks.h         the block-diffusion masks
//   dice/model/transformer.h   the SDAR/Qwen3 forward, KV cache
//   dice/model/safetensors.h   case and output files
#include <torch/torch.h>

#include <string>

#include "dice/model/config.h"
#include "dice/model/masks.h"
#include "dice/model/safetensors.h"
#include "dice/model/transformer.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"
#include "subcommand.h"

namespace dice::app {
namespace {

using namespace dice::model;

struct ForwardOptions {
  std::string model_dir;
  std::string init_preset;
  uint64_t seed = 1;
  int64_t shard_bytes = 0;
  std::string case_path;
  std::string mask_kind = "prefill";
  std::string out_path;
  std::string device = "auto";
  std::string dtype = "auto";
};

const torch::Tensor& need(const NamedTensors& c, const std::string& name, const std::string& kind, const std::string& path) {
  auto it = c.find(name);
  DICE_REQUIRE(it != c.end(), "Case file ", path, " has no \"", name, "\" tensor, which --mask ", kind, " needs.");
  return it->second;
}

void write_random_model(const ForwardOptions& o) {
  auto cfg = ModelConfig::preset(o.init_preset);
  const torch::Dtype dtype = cfg.torch_dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  Timer t;
  auto weights = init_random_weights(cfg, o.seed, dtype);
  save_hf_weights(o.model_dir, weights, o.shard_bytes);
  fs::write_file(o.model_dir + "/config.json", cfg.to_json());
  log::info(str("forward: wrote random ", o.init_preset, " weights (", cfg.num_parameters(), " parameters, seed ", o.seed,
                ") to ", o.model_dir, " in ", t.elapsed_s(), " s"));
}

// Runs the case; returns the logits [B, L, V] (fp32, CPU) and the equivalent full mask [B, 1, L, L].
void run_case(const ForwardOptions& o) {
  torch::Device device = o.device == "auto" ? (torch::cuda::is_available() ? torch::kCUDA : torch::kCPU)
                                            : torch::Device(o.device);
  torch::Dtype dtype = o.dtype == "auto" ? (device.is_cuda() ? torch::kBFloat16 : torch::kFloat32)
                                         : (o.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
  torch::NoGradGuard no_grad;
  Timer load_timer;
  Transformer model = load_hf_model(o.model_dir, dtype, device);
  const auto& cfg = model->config();
  log::info(str("forward: loaded ", o.model_dir, " (", cfg.num_hidden_layers, " layers, hidden ", cfg.hidden_size, ") on ",
                device.str(), " in ", load_timer.elapsed_s(), " s"));

  NamedTensors c = load_safetensors(o.case_path);
  const torch::Tensor ids = need(c, "ids", o.mask_kind, o.case_path).to(torch::kInt64);
  DICE_REQUIRE(ids.dim() == 2, "Case ids must be [B, L]; got ", ids.sizes(), ".");
  DICE_REQUIRE(ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < cfg.vocab_size, "Case ids must lie in [0, ",
               cfg.vocab_size, ") (the model's vocabulary).");
  const int64_t B = ids.size(0), L = ids.size(1), bs = cfg.block_size;
  auto arange = torch::arange(L, torch::kInt64).unsqueeze(0).expand({B, L}).contiguous();
  torch::Tensor positions, mask, logits;
  auto run = [&](ForwardArgs a) {
    a.ids = a.ids.to(device);
    a.positions = a.positions.to(device);
    if (a.mask.defined()) a.mask = a.mask.to(device);
    return model->forward(a);
  };
  Timer fwd;
  if (o.mask_kind == "full") {
    positions = arange;
    mask = torch::ones({B, 1, L, L}, torch::kBool);
    logits = run({ids, positions, torch::Tensor()});
  } else if (o.mask_kind == "prefill") {
    auto lengths = c.count("lengths") ? c.at("lengths").to(torch::kInt64) : torch::full({B}, L, torch::kInt64);
    positions = arange;
    mask = prefill_mask(lengths, L, bs);
    logits = run({ids, positions, mask});
  } else if (o.mask_kind == "sft") {
    const auto& seg = need(c, "segment", o.mask_kind, o.case_path);
    const auto& pos = need(c, "positions", o.mask_kind, o.case_path);
    DICE_REQUIRE(seg.dim() == 2 && 2 * seg.size(1) == L, "For --mask sft, ids must be [B, 2n] and segment [B, n].");
    positions = torch::cat({pos, pos}, 1).to(torch::kInt64);
    mask = sft_mask(seg.to(torch::kInt64), pos.to(torch::kInt64), bs);
    logits = run({ids, positions, mask});
  } else if (o.mask_kind == "tracerl") {
    auto valid = need(c, "prompt_valid", o.mask_kind, o.case_path).to(torch::kBool);
    const int64_t P = valid.size(1);
    DICE_REQUIRE(valid.dim() == 2 && valid.size(0) == B && (L - P) >= 0 && (L - P) % 2 == 0,
                 "For --mask tracerl, ids must be [B, L0 + 2 L1] and prompt_valid [B, L0].");
    positions = tracerl_positions(valid, (L - P) / 2);
    mask = tracerl_mask(valid, (L - P) / 2, bs);
    logits = run({ids, positions, mask});
  } else if (o.mask_kind == "decode") {
    // Prefill all but the last block through the KV cache, then decode the last block against
    // it; the equivalent full-sequence mask is block-causal.
    DICE_REQUIRE(L % bs == 0 && L > bs, "For --mask decode, the sequence length must be a multiple of the block size (",
                 bs, ") with at least two blocks; got ", L, ".");
    const int64_t Lp = L - bs;
    KVCache cache(cfg, B, L, dtype, device);
    positions = arange;
    mask = prefill_mask(torch::full({B}, L, torch::kInt64), L, bs);
    ForwardArgs pre{ids.narrow(1, 0, Lp), arange.narrow(1, 0, Lp),
                    prefill_mask(torch::full({B}, Lp, torch::kInt64), Lp, bs), &cache, Lp};
    auto pre_logits = run(pre);
    cache.set_lengths(torch::full({B}, Lp, torch::kInt64));
    auto lengths = cache.lengths().cpu();
    ForwardArgs dec{ids.narrow(1, Lp, bs), arange.narrow(1, Lp, bs), decode_mask(lengths, bs, L), &cache, L};
    logits = torch::cat({pre_logits, run(dec)}, 1);
  } else {
    throw Error(str("Unknown --mask \"", o.mask_kind, "\"; use full, prefill, sft, tracerl or decode."));
  }
  if (device.is_cuda()) torch::cuda::synchronize();
  log::info(str("forward: ", o.mask_kind, " B=", B, " L=", L, " in ", fwd.elapsed_s(), " s"));
  save_safetensors(o.out_path, {{"logits", logits.to(torch::kCPU, torch::kFloat32)},
                                {"ids", ids},
                                {"positions", positions.cpu()},
                                {"mask", mask.cpu().contiguous()}});
  log::info(str("forward: wrote ", o.out_path));
}

void setup_forward(CLI::App& cmd) {
  auto o = std::make_shared<ForwardOptions>();
  cmd.add_option("--model", o->model_dir, "HF model folder (config.json + safetensors)")->required();
  cmd.add_option("--init", o->init_preset, "first write random weights of this preset (tiny, sdar-1.7b, ...) to --model");
  cmd.add_option("--seed", o->seed, "seed of --init");
  cmd.add_option("--shard-bytes", o->shard_bytes, "with --init: max bytes per safetensors shard (0 = one file)");
  cmd.add_option("--case", o->case_path, "safetensors with ids [B,L] (+ lengths, segment/positions, prompt_valid)");
  cmd.add_option("--mask", o->mask_kind, "attention: full, prefill, sft, tracerl, decode (KV cache)")
      ->check(CLI::IsMember({"full", "prefill", "sft", "tracerl", "decode"}));
  cmd.add_option("--out", o->out_path, "output safetensors: logits (fp32), ids, positions, mask");
  cmd.add_option("--device", o->device, "cpu, cuda, cuda:N or auto");
  cmd.add_option("--dtype", o->dtype, "float32, bfloat16 or auto (bf16 on GPU, fp32 on CPU)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16"}));
  cmd.callback([o] {
    DICE_REQUIRE(!o->init_preset.empty() || !o->case_path.empty(), "dice forward needs --init and/or --case.");
    if (!o->init_preset.empty()) write_random_model(*o);
    if (!o->case_path.empty()) {
      DICE_REQUIRE(!o->out_path.empty(), "dice forward --case needs --out FILE for the logits.");
      run_case(*o);
    }
  });
}

}  // namespace

DICE_SUBCOMMAND("forward", "run the model on token ids and write logits (debugging, parity checks)", setup_forward);

}  // namespace dice::app
