// Transformer: KV-cache decoding equals the full block-causal forward, logits at chosen
// positions, load_weights errors, and logits against an independent PyTorch reference.
#include "dice/model/transformer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dice/model/masks.h"
#include "dice/util/error.h"
#include "model/tiny_model.h"
#include "dice/util/fs.h"

namespace dice::model {
namespace {

using testing::tiny_model;

torch::Tensor arange_positions(int64_t B, int64_t L) {
  return torch::arange(L, torch::kInt64).unsqueeze(0).expand({B, L}).contiguous();
}

double max_abs(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Full forward of one sequence with a block-causal mask: the reference for cached decoding.
torch::Tensor full_block_causal(Transformer& m, const torch::Tensor& ids_L) {
  const int64_t L = ids_L.size(0);
  ForwardArgs a;
  a.ids = ids_L.unsqueeze(0);
  a.positions = arange_positions(1, L);
  a.mask = prefill_mask(torch::full({1}, L, torch::kInt64), L, 4);
  return m->forward(a)[0];
}

TEST(Transformer, KvCacheDecodeEqualsFullForward) {
  torch::NoGradGuard g;
  auto m = tiny_model();
  const auto& cfg = m->config();
  const int64_t bs = cfg.block_size, V = cfg.vocab_size;
  torch::manual_seed(5);
  // Two prompts of different lengths: 9 tokens (2 full blocks + 1) and 6 (1 full block + 2).
  std::vector<torch::Tensor> seqs = {torch::randint(V - 1, {9}, torch::kInt64), torch::randint(V - 1, {6}, torch::kInt64)};
  std::vector<int64_t> full = {8, 4};
  const int64_t B = 2, Lp = 8, max_len = 32;

  KVCache cache(cfg, B, max_len, torch::kFloat32, torch::kCPU);
  // Prefill the full prompt blocks (right-padded to Lp).
  auto ids = torch::zeros({B, Lp}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b) ids[b].narrow(0, 0, full[b]).copy_(seqs[b].narrow(0, 0, full[b]));
  auto lengths = torch::tensor(full);
  ForwardArgs pre;
  pre.ids = ids;
  pre.positions = arange_positions(B, Lp);
  pre.mask = prefill_mask(lengths, Lp, bs);
  pre.cache = &cache;
  pre.kv_span = Lp;
  auto pre_logits = m->forward(pre);
  cache.set_lengths(lengths);
  for (int64_t b = 0; b < B; ++b) {
    auto ref = full_block_causal(m, seqs[b].narrow(0, 0, full[b]));
    EXPECT_LT(max_abs(pre_logits[b].narrow(0, 0, full[b]), ref), 1e-5);
  }

  // Three decode blocks; each: two denoising steps (with mask tokens), then the commit forward.
  std::vector<torch::Tensor> committed = {seqs[0].narrow(0, 0, 8), seqs[1].narrow(0, 0, 4)};
  for (int blk = 0; blk < 3; ++blk) {
    auto block = torch::full({B, bs}, cfg.mask_token_id, torch::kInt64);
    if (blk == 0) {  // the first decode block starts with the prompt's leftover tokens
      block[0][0] = seqs[0][8];
      block[1][0] = seqs[1][4];
      block[1][1] = seqs[1][5];
    }
    for (int step = 0; step < 3; ++step) {
      const bool commit = step == 2;
      if (step > 0) block[0][step + 1] = torch::randint(V - 1, {}, torch::kInt64);  // "unmask" a token
      if (commit) block.masked_fill_(block.eq(cfg.mask_token_id), 7);
      const int64_t span = cache.lengths().max().item<int64_t>() + bs;
      ForwardArgs d;
      d.ids = block.clone();
      d.positions = cache.lengths().unsqueeze(1) + torch::arange(bs, torch::kInt64).unsqueeze(0);
      d.mask = decode_mask(cache.lengths(), bs, span);
      d.cache = &cache;
      d.kv_span = span;
      auto logits = m->forward(d);
      for (int64_t b = 0; b < B; ++b) {
        auto ref = full_block_causal(m, torch::cat({committed[b], block[b]}));
        EXPECT_LT(max_abs(logits[b], ref.narrow(0, ref.size(0) - bs, bs)), 1e-5) << "block " << blk << " step " << step;
      }
      if (commit) {
        cache.advance(bs);
        for (int64_t b = 0; b < B; ++b) committed[b] = torch::cat({committed[b], block[b]});
      }
    }
  }
  EXPECT_EQ(cache.lengths()[0].item<int64_t>(), 8 + 3 * bs);
  EXPECT_EQ(cache.lengths()[1].item<int64_t>(), 4 + 3 * bs);
  EXPECT_GT(cache.bytes(), 0);

  // A view of row 1 decodes one more block exactly like the full cache would, in the same memory.
  auto row1 = cache.rows(1, 1);
  EXPECT_EQ(row1.batch(), 1);
  EXPECT_EQ(row1.lengths()[0].item<int64_t>(), 16);
  EXPECT_EQ(row1.k(0).data_ptr(), cache.k(0)[1].data_ptr());
  auto block = torch::randint(V - 1, {1, bs}, torch::kInt64);
  ForwardArgs d;
  d.ids = block;
  d.positions = row1.lengths().unsqueeze(1) + torch::arange(bs, torch::kInt64).unsqueeze(0);
  d.cache = &row1;
  d.kv_span = 16 + bs;  // a single row: no mask needed, it attends every slot < 20
  auto ref = full_block_causal(m, torch::cat({committed[1], block[0]}));
  EXPECT_LT(max_abs(m->forward(d)[0], ref.narrow(0, ref.size(0) - bs, bs)), 1e-5);
  row1.advance(bs);
  EXPECT_EQ(cache.lengths()[1].item<int64_t>(), 20);
  EXPECT_THROW(cache.rows(1, 2), Error);

  cache.release();
  EXPECT_FALSE(cache.allocated());
}

TEST(Transformer, LogitsAtSubsetEqualFull) {
  torch::NoGradGuard g;
  auto m = tiny_model();
  torch::manual_seed(1);
  const int64_t B = 2, n = 10;
  auto ids = torch::randint(m->config().vocab_size, {B, 2 * n}, torch::kInt64);
  auto seg = torch::zeros({B, n}, torch::kInt64);
  auto pos = arange_positions(B, n);
  ForwardArgs a;
  a.ids = ids;
  a.positions = torch::cat({pos, pos}, 1);
  a.mask = sft_mask(seg, pos, 4);
  auto full = m->forward(a);
  ASSERT_EQ(full.sizes(), (torch::IntArrayRef{B, 2 * n, m->config().vocab_size}));
  a.logits_at = torch::tensor(std::vector<int64_t>{0, 3, 19, 20, 33, 39});
  auto part = m->forward(a);
  ASSERT_EQ(part.size(0), 6);
  auto flat = full.reshape({B * 2 * n, -1});
  EXPECT_LT(max_abs(part, flat.index_select(0, a.logits_at)), 1e-6);
  // The mask matters: full bidirectional attention gives different logits.
  ForwardArgs nomask = a;
  nomask.mask = torch::Tensor();
  EXPECT_GT(max_abs(m->forward(nomask), part), 1e-3);
}

TEST(Transformer, GradientsFlowToHfNamedParameters) {
  auto m = tiny_model();
  ForwardArgs a;
  a.ids = torch::randint(m->config().vocab_size, {1, 8}, torch::kInt64);
  a.positions = arange_positions(1, 8);
  a.mask = prefill_mask(torch::full({1}, 8, torch::kInt64), 8, 4);
  a.logits_at = torch::tensor(std::vector<int64_t>{2, 5});
  m->forward(a).logsumexp(-1).sum().backward();
  auto params = m->named_parameters();
  ASSERT_TRUE(params.contains("model.layers.1.self_attn.k_norm.weight"));
  EXPECT_GT(params["model.layers.0.mlp.gate_proj.weight"].grad().abs().sum().item<double>(), 0);
  EXPECT_GT(params["lm_head.weight"].grad().abs().sum().item<double>(), 0);
  EXPECT_EQ(params.size(), parameter_shapes(m->config()).size());
}

std::string load_error(Transformer& m, const NamedTensors& w) {
  try {
    m->load_weights(w);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Transformer, LoadWeightsErrors) {
  auto cfg = ModelConfig::preset("tiny");
  Transformer m(cfg, torch::kFloat32, torch::kCPU);
  auto w = init_random_weights(cfg, 1, torch::kBFloat16);
  EXPECT_EQ(load_error(m, w), "");  // bf16 converted to the model's fp32
  EXPECT_TRUE(torch::equal(m->named_parameters()["model.norm.weight"], torch::ones({cfg.hidden_size})));

  auto missing = w;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  auto e = load_error(m, missing);
  EXPECT_NE(e.find("Missing: model.layers.1.mlp.up_proj.weight"), std::string::npos) << e;

  auto extra = w;
  extra["model.layers.9.mlp.up_proj.weight"] = torch::zeros({1});
  e = load_error(m, extra);
  EXPECT_NE(e.find("Unexpected: model.layers.9.mlp.up_proj.weight"), std::string::npos) << e;

  auto bad = w;
  bad["model.embed_tokens.weight"] = torch::zeros({3, 3});
  e = load_error(m, bad);
  EXPECT_NE(e.find("model.embed_tokens.weight (expected [512, 64], got [3, 3])"), std::string::npos) << e;

  auto ints = w;
  ints["model.norm.weight"] = torch::ones({cfg.hidden_size}, torch::kInt64);
  EXPECT_NE(load_error(m, ints).find("floating point"), std::string::npos);

  // Tied: lm_head.weight is the embedding; a stored copy is accepted and ignored.
  auto tcfg = cfg;
  tcfg.tie_word_embeddings = true;
  Transformer tied(tcfg, torch::kFloat32, torch::kCPU);
  EXPECT_EQ(load_error(tied, w), "");
  ForwardArgs a;
  a.ids = torch::tensor(std::vector<int64_t>{1, 2, 3}).unsqueeze(0);
  a.positions = arange_positions(1, 3);
  torch::NoGradGuard g;
  auto h = tied->hidden(a);
  auto logits = tied->forward(a);
  EXPECT_LT(max_abs(logits, torch::matmul(h, w["model.embed_tokens.weight"].to(torch::kFloat32).t())), 1e-5);
}

TEST(Transformer, ForwardArgumentErrors) {
  auto m = tiny_model();
  ForwardArgs a;
  a.ids = torch::zeros({1, 4}, torch::kInt64);
  a.positions = torch::zeros({1, 5}, torch::kInt64);
  EXPECT_THROW(m->forward(a), Error);
  a.positions = torch::zeros({1, 4}, torch::kInt64);
  a.mask = torch::ones({1, 1, 4, 5}, torch::kBool);
  EXPECT_THROW(m->forward(a), Error);
  KVCache cache(m->config(), 2, 8, torch::kFloat32, torch::kCPU);
  a.mask = torch::Tensor();
  a.cache = &cache;
  a.kv_span = 4;
  EXPECT_THROW(m->forward(a), Error);  // batch 1 vs cache batch 2
}

// Independent reference: tests/model/qwen3_reference.py implements Qwen3 from its equations in
// PyTorch, reads the same safetensors, and compares its logits with dice's.
TEST(Transformer, MatchesIndependentPyTorchReference) {
  const std::string python = DICE_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python with torch (DICE_PYTHON is empty)";
  torch::NoGradGuard g;
  auto dir = fs::make_temp_dir("dice-model-ref");
  auto m = tiny_model(23);
  save_hf_weights(dir + "/model", m->state_dict(torch::kFloat32), /*max_shard_bytes=*/200000);
  fs::write_file(dir + "/model/config.json", m->config().to_json());
  auto loaded = load_hf_model(dir + "/model", torch::kFloat32, torch::kCPU);

  torch::manual_seed(9);
  const int64_t P = 7, R = 8;
  auto valid = torch::ones({2, P}, torch::kBool);
  valid[1].narrow(0, 0, 2).fill_(false);
  ForwardArgs a;
  a.ids = torch::randint(m->config().vocab_size, {2, P + 2 * R}, torch::kInt64);
  a.positions = tracerl_positions(valid, R);
  a.mask = tracerl_mask(valid, R, 4);
  auto logits = loaded->forward(a);
  save_safetensors(dir + "/case.safetensors",
                   {{"ids", a.ids}, {"positions", a.positions}, {"mask", a.mask}, {"logits", logits}});
  const std::string cmd = python + " " + DICE_SOURCE_DIR + "/tests/model/qwen3_reference.py " + dir + "/model " + dir +
                          "/case.safetensors 1e-4 > " + dir + "/ref.log 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string log = fs::read_file(dir + "/ref.log");
  std::printf("%s", log.c_str());
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("max_abs_diff"), std::string::npos) << log;
}

}  // namespace
}  // namespace dice::model
