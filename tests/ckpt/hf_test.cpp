// ckpt/hf: HF folder -> checkpoint -> HF folder bit-exact, streamed init, and the `dice ckpt` CLI.
#include "dice/ckpt/hf.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ckpt_test_util.h"
#include "dice/ckpt/checkpoint.h"
#include "dice/model/safetensors.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::ckpt {
namespace {

namespace stdfs = std::filesystem;
using testing::TempDir;

// Raw bytes of every tensor as stored in a safetensors file (or an HF folder's shards).
std::map<std::string, std::string> stored_tensor_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::string file = e.path().string();
    model::SafetensorsHeader h = model::read_safetensors_header(file);
    std::string bytes = fs::read_file(file);
    for (const auto& t : h.tensors)
      out[t.name] = t.dtype + ":" + bytes.substr(h.data_begin_bytes + t.begin_bytes, t.end_bytes - t.begin_bytes);
  }
  return out;
}

// A tiny HF folder whose tensors mix bf16, fp16 and fp32.
model::ModelConfig make_hf_folder(const std::string& dir, int64_t max_shard_bytes = 0) {
  model::ModelConfig cfg = model::ModelConfig::preset("tiny");
  NamedTensors w = model::init_random_weights(cfg, 11, torch::kBFloat16);
  w["model.layers.0.mlp.up_proj.weight"] = w["model.layers.0.mlp.up_proj.weight"].to(torch::kHalf);
  w["model.norm.weight"] = torch::randn({cfg.hidden_size});
  model::save_hf_weights(dir, w, max_shard_bytes);
  fs::write_file(dir + "/config.json", cfg.to_json());
  stdfs::copy_file(std::string(DICE_DATA_DIR) + "/qwen3/tokenizer.json", dir + "/tokenizer.json");
  stdfs::copy_file(std::string(DICE_DATA_DIR) + "/qwen3/tokenizer_config.json", dir + "/tokenizer_config.json");
  return cfg;
}

TEST(Hf, ImportExportRoundTripIsBitExact) {
  TempDir tmp;
  const std::string hf = tmp / "hf", run = tmp / "run", out = tmp / "out";
  make_hf_folder(hf);
  std::string dir = import_hf(hf, run, 7);
  EXPECT_EQ(dir, run + "/step_000007");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "COMPLETE", "model.h5", "state.h5"})
    EXPECT_TRUE(stdfs::exists(dir + "/" + f)) << f;
  EXPECT_EQ(load_state(dir).stage, "import");
  EXPECT_EQ(load_state(dir).step, 7);

  export_hf(dir, out);
  testing::expect_bit_exact(model::load_safetensors(hf), model::load_safetensors(out));
  EXPECT_EQ(stored_tensor_bytes(hf), stored_tensor_bytes(out));
  EXPECT_EQ(fs::read_file(hf + "/config.json"), fs::read_file(out + "/config.json"));
  EXPECT_EQ(fs::read_file(hf + "/tokenizer.json"), fs::read_file(out + "/tokenizer.json"));

  // Over an existing model only when asked; then stale weights are replaced, contents still exact.
  EXPECT_THROW(export_hf(dir, out, 40'000), Error);
  EXPECT_TRUE(stdfs::exists(out + "/model.safetensors"));
  export_hf(dir, out, 40'000, /*verify=*/true, /*replace=*/true);
  EXPECT_FALSE(stdfs::exists(out + "/model.safetensors"));
  EXPECT_TRUE(stdfs::exists(out + "/model.safetensors.index.json"));
  EXPECT_EQ(stored_tensor_bytes(hf), stored_tensor_bytes(out));
}

TEST(Hf, ImportShardedFolder) {
  TempDir tmp;
  make_hf_folder(tmp / "hf", 30'000);
  ASSERT_TRUE(stdfs::exists(tmp / "hf/model.safetensors.index.json"));
  std::string dir = import_hf(tmp / "hf", tmp / "run");
  testing::expect_bit_exact(model::load_safetensors(tmp / "hf"), load_model(dir));
}

TEST(Hf, ImportRejectsWeightsThatDoNotMatchConfig) {
  TempDir tmp;
  model::ModelConfig cfg = make_hf_folder(tmp / "hf");
  cfg.num_hidden_layers = 3;  // config claims a layer the weights lack
  fs::write_file(tmp / "hf/config.json", cfg.to_json());
  try {
    import_hf(tmp / "hf", tmp / "run");
    FAIL() << "mismatched weights accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2."), std::string::npos) << e.what();
  }
  EXPECT_THROW(import_hf(tmp / "nothing", tmp / "run"), Error);
}

TEST(Hf, StreamedInitMatchesInitRandomWeights) {
  model::ModelConfig cfg = model::ModelConfig::preset("tiny");
  for (bool bf16 : {true, false}) {
    for (int64_t shard : {int64_t{0}, int64_t{50'000}}) {
      TempDir tmp;
      init_hf_model(cfg, tmp.path, 5, bf16, std::string(DICE_DATA_DIR) + "/qwen3", shard);
      NamedTensors want = model::init_random_weights(cfg, 5, bf16 ? torch::kBFloat16 : torch::kFloat32);
      testing::expect_bit_exact(want, model::load_safetensors(tmp.path));
      EXPECT_EQ(model::ModelConfig::from_hf_dir(tmp.path).hidden_size, cfg.hidden_size);
      EXPECT_TRUE(stdfs::exists(tmp / "tokenizer.json"));
      EXPECT_TRUE(stdfs::exists(tmp / "generation_config.json"));
      EXPECT_EQ(stdfs::exists(tmp / "model.safetensors.index.json"), shard > 0);
    }
  }
}

TEST(Hf, ModelInitConfigPresetsAndOverrides) {
  const std::string dir = std::string(DICE_SOURCE_DIR) + "/configs/models/";
  ModelInitConfig tiny = load_model_init_config(dir + "tiny.yaml", {"model.num_hidden_layers=3", "seed=9"});
  EXPECT_EQ(tiny.model.cfg.hidden_size, 64);
  EXPECT_EQ(tiny.model.cfg.num_hidden_layers, 3);
  EXPECT_EQ(tiny.model.cfg.vocab_size, 151936);
  EXPECT_EQ(tiny.model.cfg.mask_token_id, 151669);
  EXPECT_EQ(tiny.model.cfg.block_size, 4);
  EXPECT_EQ(tiny.seed, 9);
  for (const char* name : {"sdar-1.7b", "sdar-4b", "sdar-8b"}) {
    ModelInitConfig c = load_model_init_config(dir + name + ".yaml");
    EXPECT_EQ(c.model.cfg, model::ModelConfig::preset(name)) << name;
  }
  EXPECT_THROW(load_model_init_config(dir + "tiny.yaml", {"model.hidden_sise=3"}), Error);
  EXPECT_THROW(load_model_init_config(dir + "tiny.yaml", {"dtype=fp8"}), Error);
}

struct RunResult {
  int exit_code;
  std::string output;
};

RunResult run_dice(const std::string& args) {
  // DICE_EXE overrides the built executable (e.g. to test an installed dice).
  const char* env = std::getenv("DICE_EXE");
  const std::string bin = env && *env ? std::string(env) : std::string(DICE_BINARY_DIR) + "/src/app/dice";
  EXPECT_TRUE(stdfs::exists(bin)) << "the dice executable is not built (" << bin << "): build the `dice` target";
  std::string cmd = bin + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  RunResult r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(HfCli, InitImportInfoExportEndToEnd) {
  TempDir tmp;
  const std::string cfg = std::string(DICE_SOURCE_DIR) + "/configs/models/tiny.yaml";
  RunResult init = run_dice("ckpt init --config " + cfg + " --set model.num_hidden_layers=1 --seed 3 --out " +
                            (tmp / "model"));
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_EQ(model::ModelConfig::from_hf_dir(tmp / "model").num_hidden_layers, 1);
  EXPECT_EQ(model::ModelConfig::from_hf_dir(tmp / "model").vocab_size, 151936);
  EXPECT_TRUE(stdfs::exists(tmp / "model/tokenizer.json"));

  RunResult imp = run_dice("ckpt import-hf --hf " + (tmp / "model") + " --out " + (tmp / "run") + " --step 3");
  ASSERT_EQ(imp.exit_code, 0) << imp.output;
  EXPECT_TRUE(stdfs::exists(tmp / "run/step_000003/COMPLETE"));

  RunResult info = run_dice("ckpt info " + (tmp / "run"));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("step        3"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("hidden 64, 1 layers"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("bfloat16:"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("verified    ok"), std::string::npos) << info.output;

  RunResult exp = run_dice("ckpt export-hf --checkpoint " + (tmp / "run/step_000003") + " --out " + (tmp / "export"));
  ASSERT_EQ(exp.exit_code, 0) << exp.output;
  EXPECT_EQ(stored_tensor_bytes(tmp / "model"), stored_tensor_bytes(tmp / "export"));
  EXPECT_EQ(fs::read_file(tmp / "model/tokenizer.json"), fs::read_file(tmp / "export/tokenizer.json"));

  // A flipped byte: info reports the dataset and exits 2.
  const std::string h5 = tmp / "run/step_000003/model.h5";
  testing::flip_byte(h5, testing::dataset_offset(h5, "model.embed_tokens.weight") + 100);
  RunResult flipped = run_dice("ckpt info " + (tmp / "run/step_000003"));
  EXPECT_EQ(flipped.exit_code, 2) << flipped.output;
  EXPECT_NE(flipped.output.find("'model.embed_tokens.weight' does not match its SHA-256"), std::string::npos)
      << flipped.output;
  EXPECT_NE(flipped.output.find("failed verification"), std::string::npos) << flipped.output;

  // A truncated model.h5: info and export refuse it with a sentence, exit code 2.
  stdfs::resize_file(h5, stdfs::file_size(h5) / 2);
  RunResult bad = run_dice("ckpt export-hf --checkpoint " + (tmp / "run/step_000003") + " --out " + (tmp / "x"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("dice: error: "), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("checkpoint " + h5 + " is corrupt or truncated"), std::string::npos) << bad.output;
  RunResult bad_run = run_dice("ckpt info " + (tmp / "run"));
  EXPECT_EQ(bad_run.exit_code, 2) << bad_run.output;
  EXPECT_NE(bad_run.output.find("skipping checkpoint"), std::string::npos) << bad_run.output;
}

}  // namespace
}  // namespace dice::ckpt
