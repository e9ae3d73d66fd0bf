// The benchmark's PyTorch peer (tools/gpu/sampler_peer.py, its own-Qwen3 path) decodes greedily
// to the same tokens and step maps as the sampler on a tiny model: so the GPU greedy-equality
// check compares two implementations of one algorithm, and the peer's loop is the SDAR loop.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "dice/model/config.h"
#include "dice/model/safetensors.h"
#include "dice/model/transformer.h"
#include "dice/rollout/sampler.h"
#include "dice/util/fs.h"

using namespace dice;

TEST(Peer, GreedyTokensAndStepMapsEqualTheSampler) {
  const std::string python = DICE_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no python with torch (DICE_PYTHON) configured";
  const std::string dir = fs::make_temp_dir("dice-peer-test");
  auto cfg = model::ModelConfig::preset("tiny");
  auto w = model::init_random_weights(cfg, 77);
  for (auto& [name, t] : w)
    if (name.find("norm") == std::string::npos) t.mul_(name == "lm_head.weight" ? 30.0 : 8.0);  // peaked, not saturated
  model::save_hf_weights(dir, w);
  fs::write_file(dir + "/config.json", cfg.to_json());
  model::Transformer m(cfg, torch::kFloat32, torch::kCPU);
  m->load_weights(w);

  std::vector<std::vector<int64_t>> prompts = {{5, 9, 44, 3, 17}, {8, 8, 100, 200, 300, 400, 12, 13}, {7, 6, 5, 4, 3, 2, 9, 99, 199, 299, 399}};
  rollout::SamplerConfig c;
  c.block_size = 4;
  c.steps = 4;
  c.strategy = "static";
  c.temperature = 0;
  c.max_new_tokens = 16;
  c.stop_ids = {};
  c.max_batch = 3;
  c.max_len = 64;
  auto got = rollout::Sampler(m, c).generate(prompts);

  fs::write_file(dir + "/prompts.json", nlohmann::json(prompts).dump());
  const std::string cmd = python + " " + DICE_SOURCE_DIR + "/tools/gpu/sampler_peer.py --mode greedy --own --model-dir " +
                          dir + " --prompts " + dir + "/prompts.json --max-new 16 --dtype float32 --out " + dir +
                          "/peer.json";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto peer = nlohmann::json::parse(fs::read_file(dir + "/peer.json"));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].response_ids, peer["responses"][i].get<std::vector<int64_t>>()) << "prompt " << i;
    EXPECT_EQ(got[i].step_map, peer["step_maps"][i].get<std::vector<int64_t>>()) << "prompt " << i;
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}
