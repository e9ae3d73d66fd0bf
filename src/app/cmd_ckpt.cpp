// `dice ckpt`: inspect checkpoints, convert HF folders <-> checkpoints, create random model folders.
//   dice ckpt info PATH                     (a checkpoint, or a run dir: its latest complete one)
//   dice ckpt import-hf --hf DIR --out RUN_DIR [--step N]
//   dice ckpt export-hf --checkpoint PATH --out DIR [--max-shard-bytes N] [--dtype auto|bfloat16|float16|float32]
//   dice ckpt init --config configs/models/tiny.yaml [--set model.num_hidden_layers=4] --out DIR
#include <cstdio>
#include <filesystem>

#include "dice/ckpt/checkpoint.h"
#include "dice/ckpt/hf.h"
#include "dice/text/tokenizer.h"
#include "dice/util/error.h"
#include "dice/util/home.h"
#include "subcommand.h"

namespace dice::app {
namespace {

namespace stdfs = std::filesystem;

// A checkpoint directory itself, or the newest complete checkpoint of a run directory (found with
// `verify_search`; *searched_verified tells whether that search already verified the checksums).
std::string resolve_checkpoint(const std::string& path, bool verify_search, bool* searched_verified = nullptr) {
  DICE_REQUIRE(stdfs::exists(path), "checkpoint ", path, " does not exist");
  DICE_REQUIRE(stdfs::is_directory(path), "checkpoint ", path,
               " is a file; pass a checkpoint folder (step_N/) or a run folder.");
  if (searched_verified) *searched_verified = false;
  if (stdfs::exists(stdfs::path(path) / "state.h5") || stdfs::exists(stdfs::path(path) / "model.h5")) return path;
  auto latest = ckpt::find_latest_complete(path, verify_search);
  DICE_REQUIRE(latest.has_value(), path, " is neither a checkpoint nor a run directory with a complete checkpoint");
  if (searched_verified) *searched_verified = verify_search;
  return *latest;
}

// Relative paths that do not exist here are tried against dice's home (data/qwen3 by default).
std::string resolve_data_path(const std::string& p) { return util::in_home(p); }

// The model's vocabulary must hold every tokenizer id, and its mask token must be the tokenizer's
// mask token or, when the tokenizer has none (init adds <|MASK|>), an id past the tokenizer's.
void check_vocabulary(const model::ModelConfig& cfg, const std::string& tok_dir) {
  if (tok_dir.empty() || !stdfs::is_regular_file(stdfs::path(tok_dir) / "tokenizer.json")) return;  // init names it
  auto tok = text::Tokenizer::from_dir(tok_dir);
  DICE_REQUIRE(cfg.vocab_size >= tok.vocab_size(), "model.vocab_size ", cfg.vocab_size,
               " is smaller than the tokenizer's (", tok.vocab_size(), " ids in ", tok_dir,
               "): its tokens would fall outside the embedding; set model.vocab_size >= ", tok.vocab_size(), ".");
  if (tok.has_mask_token()) {
    DICE_REQUIRE(cfg.mask_token_id == tok.mask_token_id(), "model.mask_token_id ", cfg.mask_token_id,
                 " is not the tokenizer's mask token (", tok.mask_token_id(), " in ", tok_dir, "); set it to ",
                 tok.mask_token_id(), ".");
  } else {
    DICE_REQUIRE(cfg.mask_token_id >= tok.vocab_size(), "model.mask_token_id ", cfg.mask_token_id,
                 " is an ordinary token of the tokenizer in ", tok_dir, " (ids 0..", tok.vocab_size() - 1,
                 "); <|MASK|> needs an id of its own: set it to ", tok.vocab_size(), " or above (and below vocab_size).");
  }
}

void setup_info(CLI::App& cmd) {
  struct Args {
    std::string path;
    bool no_verify = false;
    bool show_config = false;
  };
  auto a = std::make_shared<Args>();
  cmd.add_option("path", a->path, "checkpoint directory, or a run directory (its latest complete checkpoint)")
      ->required();
  cmd.add_flag("--no-verify", a->no_verify, "skip the SHA-256 verification of every dataset");
  cmd.add_flag("--show-config", a->show_config, "also print the resolved run config stored in the checkpoint");
  cmd.callback([a] {
    // The search only opens the files: describe() verifies (and reports) the one it shows.
    std::string dir = resolve_checkpoint(a->path, false);
    bool ok = true;
    std::fputs(ckpt::describe(dir, !a->no_verify, &ok).c_str(), stdout);
    std::fflush(stdout);
    DICE_REQUIRE(ok, "checkpoint ", dir, " failed verification (details above)");
    if (a->show_config) {
      std::string yaml = ckpt::load_state(dir, !a->no_verify).config_yaml;
      std::printf("--- run config ---\n%s\n", yaml.c_str());
    }
  });
}

void setup_import(CLI::App& cmd) {
  struct Args {
    std::string hf, out;
    int64_t step = 0;
    bool replace = false;
  };
  auto a = std::make_shared<Args>();
  cmd.add_option("--hf", a->hf, "Hugging Face model folder (config.json, safetensors, tokenizer)")->required();
  cmd.add_option("--out", a->out, "run directory; the checkpoint goes to <out>/step_<N>")->required();
  cmd.add_option("--step", a->step, "step number of the checkpoint")->capture_default_str();
  cmd.add_flag("--replace", a->replace, "replace an existing <out>/step_<N>");
  cmd.callback([a] {
    std::string dir = ckpt::import_hf(a->hf, a->out, a->step, a->replace);
    std::printf("%s\n", dir.c_str());
  });
}

void setup_export(CLI::App& cmd) {
  struct Args {
    std::string checkpoint, out;
    int64_t max_shard_bytes = 0;
    bool no_verify = false;
    bool replace = false;
    std::string dtype = "auto";
  };
  auto a = std::make_shared<Args>();
  cmd.add_option("--checkpoint", a->checkpoint, "checkpoint directory, or a run directory (its latest)")->required();
  cmd.add_option("--out", a->out, "output HF folder")->required();
  cmd.add_option("--max-shard-bytes", a->max_shard_bytes,
                 "shard the safetensors (0: one model.safetensors up to 5 GB, then 5 GB shards with an index)")
      ->capture_default_str();
  cmd.add_option("--dtype", a->dtype,
                 "auto (a trained run's fp32 weights in config.json's torch_dtype, bfloat16 if it names none; "
                 "an imported model's dtypes as stored), bfloat16, float16 or float32")
      ->capture_default_str();
  cmd.add_flag("--no-verify", a->no_verify, "skip checksum verification while loading");
  cmd.add_flag("--replace", a->replace, "replace the model in an existing --out (kept until the new one is whole)");
  cmd.callback([a] {
    bool verified = false;
    std::string dir = resolve_checkpoint(a->checkpoint, !a->no_verify, &verified);
    ckpt::export_hf(dir, a->out, a->max_shard_bytes, !a->no_verify && !verified, a->replace, a->dtype);
    std::printf("%s\n", a->out.c_str());
  });
}

void setup_init(CLI::App& cmd) {
  struct Args {
    ConfigArgs config;
    std::string preset, out, dtype, tokenizer;
    int64_t seed = -1;
    int64_t max_shard_bytes = -1;
    bool replace = false;
  };
  auto a = std::make_shared<Args>();
  a->config.add_to(cmd);
  cmd.add_option("--preset", a->preset, "configs/models/<NAME>.yaml (tiny, sdar-1.7b, sdar-4b, sdar-8b) instead of --config");
  cmd.add_option("--out", a->out, "output HF folder")->required();
  cmd.add_option("--seed", a->seed, "random seed (default: the config's)");
  cmd.add_option("--dtype", a->dtype, "weight dtype (default: the config's)")->check(CLI::IsMember({"bf16", "fp32"}));
  cmd.add_option("--tokenizer", a->tokenizer, "folder with tokenizer.json (default: the config's, data/qwen3)");
  cmd.add_option("--max-shard-bytes", a->max_shard_bytes, "safetensors shard size (0: automatic)");
  cmd.add_flag("--replace", a->replace, "replace the model in an existing --out (kept until the new one is whole)");
  cmd.callback([a] {
    DICE_REQUIRE(!a->config.config_path.empty() || !a->preset.empty(),
                 "dice ckpt init needs --config configs/models/<preset>.yaml or --preset NAME");
    std::vector<std::string> sets = a->config.sets;
    std::string config_path = a->config.config_path;
    if (!a->preset.empty() && config_path.empty()) {
      // --preset NAME means configs/models/NAME.yaml (the project's presets), else the built-in shape.
      std::string yaml = resolve_data_path("configs/models/" + a->preset + ".yaml");
      if (stdfs::is_regular_file(yaml)) config_path = yaml;
      else sets.insert(sets.begin(), "preset=" + a->preset);
    } else if (!a->preset.empty()) {
      sets.insert(sets.begin(), "preset=" + a->preset);
    }
    ckpt::ModelInitConfig c = ckpt::load_model_init_config(config_path, sets);
    if (a->seed >= 0) c.seed = a->seed;
    if (!a->dtype.empty()) c.dtype = a->dtype;
    if (!a->tokenizer.empty()) c.tokenizer = a->tokenizer;
    if (a->max_shard_bytes >= 0) c.max_shard_bytes = a->max_shard_bytes;
    const std::string tok_dir = resolve_data_path(c.tokenizer);
    check_vocabulary(c.model.cfg, tok_dir);
    ckpt::init_hf_model(c.model.cfg, a->out, static_cast<uint64_t>(c.seed), c.dtype == "bf16", tok_dir,
                        c.max_shard_bytes, a->replace);
    std::printf("%s\n", a->out.c_str());
  });
}

void setup_ckpt(CLI::App& cmd) {
  cmd.require_subcommand(1);
  setup_info(*cmd.add_subcommand("info", "summarize a checkpoint and verify its checksums"));
  setup_import(*cmd.add_subcommand("import-hf", "Hugging Face folder -> checkpoint"));
  setup_export(*cmd.add_subcommand("export-hf", "checkpoint -> Hugging Face folder (safetensors)"));
  setup_init(*cmd.add_subcommand("init", "random model folder in HF format from a model config"));
}

}  // namespace

DICE_SUBCOMMAND("ckpt", "inspect checkpoints; import from / export to HF safetensors; init random models", setup_ckpt);

}  // namespace dice::app
