// The fused inference path (ForwardArgs::fused): packed q|k|v and gate|up weights that stay the
// HF-named parameters, and forwards (with and without a KV cache) equal to the plain path. On
// this CPU build the fused operators are PyTorch fallbacks; the CUDA kernels are checked against
// the plain path by `dice bench sample --greedy-check --fused on` on the GPU node.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "dice/model/fused_ops.h"
#include "dice/model/masks.h"
#include "dice/model/transformer.h"
#include "dice/util/error.h"
#include "model/tiny_model.h"

namespace dice::model {
namespace {

Transformer tiny_model(uint64_t seed = 3) { return testing::tiny_model(seed); }

double max_abs(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

char* bytes(const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

TEST(Fused, PackedWeightsAreTheParameters) {
  auto m = tiny_model();
  auto p = m->named_parameters();
  const auto& q = p["model.layers.1.self_attn.q_proj.weight"];
  const auto& k = p["model.layers.1.self_attn.k_proj.weight"];
  const auto& v = p["model.layers.1.self_attn.v_proj.weight"];
  const auto& gate = p["model.layers.0.mlp.gate_proj.weight"];
  const auto& up = p["model.layers.0.mlp.up_proj.weight"];
  // Consecutive rows of one buffer, in q|k|v and gate|up order.
  EXPECT_EQ(bytes(k), bytes(q) + q.numel() * q.element_size());
  EXPECT_EQ(bytes(v), bytes(k) + k.numel() * k.element_size());
  EXPECT_EQ(bytes(up), bytes(gate) + gate.numel() * gate.element_size());
  EXPECT_TRUE(q.is_leaf() && q.requires_grad() && q.is_contiguous());
  EXPECT_EQ(p.size(), parameter_shapes(m->config()).size());
  // Still trainable one by one: the plain path's gradients reach each packed parameter.
  ForwardArgs a;
  a.ids = torch::randint(m->config().vocab_size, {1, 8}, torch::kInt64);
  a.positions = torch::arange(8, torch::kInt64).unsqueeze(0);
  m->forward(a).logsumexp(-1).sum().backward();
  EXPECT_GT(k.grad().abs().sum().item<double>(), 0);
  EXPECT_GT(up.grad().abs().sum().item<double>(), 0);
}

// Plain and fused forwards of the same input: a prefill into a cache, then a decode step.
void expect_paths_agree(Transformer& m, const char* what) {
  const auto& cfg = m->config();
  const int64_t B = 2, Lp = 8, bs = cfg.block_size;
  torch::manual_seed(9);
  auto ids = torch::randint(cfg.vocab_size - 1, {B, Lp}, torch::kInt64);
  auto lengths = torch::tensor(std::vector<int64_t>{8, 4});
  KVCache c_plain(cfg, B, 32, torch::kFloat32, torch::kCPU), c_fused(cfg, B, 32, torch::kFloat32, torch::kCPU);
  auto run = [&](bool fused, KVCache* cache, const torch::Tensor& in, const torch::Tensor& pos, const torch::Tensor& mask,
                 int64_t span) {
    ForwardArgs a;
    a.ids = in;
    a.positions = pos;
    a.mask = mask;
    a.cache = cache;
    a.kv_span = span;
    a.fused = fused;
    return m->forward(a);
  };
  auto pos = torch::arange(Lp, torch::kInt64).unsqueeze(0).expand({B, Lp}).contiguous();
  auto mask = prefill_mask(lengths, Lp, bs);
  EXPECT_LT(max_abs(run(false, nullptr, ids, pos, mask, 0), run(true, nullptr, ids, pos, mask, 0)), 1e-5) << what;
  EXPECT_LT(max_abs(run(false, &c_plain, ids, pos, mask, Lp), run(true, &c_fused, ids, pos, mask, Lp)), 1e-5) << what;
  c_plain.set_lengths(lengths);
  c_fused.set_lengths(lengths);
  auto block = torch::full({B, bs}, cfg.mask_token_id, torch::kInt64);
  block[1][0] = 17;
  auto dpos = lengths.unsqueeze(1) + torch::arange(bs, torch::kInt64).unsqueeze(0);
  const int64_t span = Lp + bs;
  auto dmask = decode_mask(lengths, bs, span);
  auto want = run(false, &c_plain, block, dpos, dmask, span);
  EXPECT_LT(max_abs(want, run(true, &c_fused, block, dpos, dmask, span)), 1e-5) << what;
  // kv_lengths (each row attends slots [0, length)) instead of the decode mask, plain and fused.
  for (bool fused : {false, true}) {
    ForwardArgs a;
    a.ids = block;
    a.positions = dpos;
    a.cache = fused ? &c_fused : &c_plain;
    a.kv_span = span;
    a.kv_lengths = lengths + bs;
    a.fused = fused;
    EXPECT_LT(max_abs(want, m->forward(a)), 1e-5) << what << (fused ? " fused" : " plain") << " with kv_lengths";
    a.mask = dmask;  // one or the other
    EXPECT_THROW(m->forward(a), Error);
  }
  // K/V written to the same slots. The packed q|k|v GEMM may sum in another order than the three
  // separate ones (OpenBLAS does: 1.2e-6 here), so the bound is the logits' rounding bound.
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    EXPECT_LT(max_abs(c_plain.k(l), c_fused.k(l)), 1e-5) << what << " layer " << l;
    EXPECT_LT(max_abs(c_plain.v(l), c_fused.v(l)), 1e-5) << what << " layer " << l;
  }
}

TEST(Fused, ForwardEqualsPlainWithAndWithoutCache) {
  torch::NoGradGuard g;
  auto m = tiny_model();
  expect_paths_agree(m, "as built");
  // New weights loaded in place reach the packed GEMMs.
  m->load_weights(init_random_weights(m->config(), 21, torch::kFloat32));
  expect_paths_agree(m, "after load_weights");
}

TEST(Fused, RepacksWhenAParameterIsReplaced) {
  auto m = tiny_model();
  auto p = m->named_parameters();
  auto& k = p["model.layers.0.self_attn.k_proj.weight"];
  {
    torch::NoGradGuard g;
    k.set_data(k.clone() * 2);  // k now lives elsewhere (as after a device move)
  }
  {
    // Repacked inside the sampler's inference mode, the parameters stay ordinary tensors.
    c10::InferenceMode inference;
    expect_paths_agree(m, "after replacing k_proj");
  }
  const auto& q = p["model.layers.0.self_attn.q_proj.weight"];
  EXPECT_EQ(bytes(k), bytes(q) + q.numel() * q.element_size());
  EXPECT_FALSE(k.is_inference());
  EXPECT_TRUE(k.requires_grad());
}

TEST(Fused, NeedsNoGradAndChecksArguments) {
  auto m = tiny_model();
  ForwardArgs a;
  a.ids = torch::zeros({1, 4}, torch::kInt64);
  a.positions = torch::arange(4, torch::kInt64).unsqueeze(0);
  a.fused = true;
  EXPECT_THROW(m->forward(a), Error);
  torch::NoGradGuard g;
  EXPECT_NO_THROW(m->forward(a));
  auto x = torch::randn({3, 8});
  EXPECT_THROW(fused::rms_norm(x, torch::ones({7}), 1e-6), Error);
  EXPECT_THROW(fused::silu_mul(torch::randn({3, 5})), Error);
  auto nc = torch::randn({8, 3}).t();
  EXPECT_THROW(fused::add_rms_norm_(nc, torch::randn({3, 8}), torch::ones({8}), 1e-6), Error);
  auto k = torch::zeros({1, 1, 4, 4}), v = torch::zeros({1, 1, 4, 4});
  auto cs = torch::ones({1, 2, 4});
  EXPECT_THROW(fused::qk_norm_rope_scatter(torch::randn({1, 2, 13}), torch::ones({4}), torch::ones({4}), 1e-6, cs, cs,
                                           torch::zeros({1, 2}, torch::kInt64), k, v, 1, 1),
               Error);  // 13 columns is not 3 heads of 4
}

TEST(Fused, OperatorsMatchTheirDefinitions) {
  torch::manual_seed(4);
  auto x = torch::randn({5, 16}), w = torch::rand({16}) + 0.5, d = torch::randn({5, 16});
  auto want = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6));
  EXPECT_LT(max_abs(fused::rms_norm(x, w, 1e-6), want), 1e-6);
  auto r = x.clone();
  auto y = fused::add_rms_norm_(r, d, w, 1e-6);
  EXPECT_TRUE(torch::equal(r, x + d));
  EXPECT_LT(max_abs(y, fused::rms_norm(x + d, w, 1e-6)), 1e-6);
  auto gu = torch::randn({2, 3, 10});
  EXPECT_LT(max_abs(fused::silu_mul(gu), torch::silu(gu.narrow(-1, 0, 5)) * gu.narrow(-1, 5, 5)), 1e-6);
  // RoPE with the folded sign equals HF's rotate_half form.
  auto t = torch::randn({2, 8}), cos = torch::randn({2, 8}), sin = torch::randn({2, 8});
  auto rotate_half = torch::cat({-t.narrow(-1, 4, 4), t.narrow(-1, 0, 4)}, -1);
  auto signed_sin = torch::cat({-sin.narrow(-1, 0, 4), sin.narrow(-1, 4, 4)}, -1);
  EXPECT_TRUE(torch::equal(fused::rope_reference(t, cos, signed_sin), t * cos + rotate_half * sin));
  // K/V land in the slots given, whatever their order.
  const int64_t B = 1, L = 3, hq = 2, hkv = 1, D = 4;
  auto qkv = torch::randn({B, L, (hq + 2 * hkv) * D});
  auto kd = torch::zeros({B, hkv, 6, D}), vd = torch::zeros({B, hkv, 6, D});
  auto slots = torch::tensor(std::vector<int64_t>{5, 0, 2}).unsqueeze(0);
  auto ones = torch::ones({B, L, D}), zeros = torch::zeros({B, L, D});
  auto q = fused::qk_norm_rope_scatter(qkv, torch::ones({D}), torch::ones({D}), 1e-6, ones, zeros, slots, kd, vd, hq, hkv);
  EXPECT_EQ(q.sizes(), torch::IntArrayRef({B, hq, L, D}));
  EXPECT_TRUE(q.is_contiguous());
  for (int64_t l = 0; l < L; ++l) {
    const int64_t s = slots[0][l].item<int64_t>();
    auto head = [&](int64_t h) { return qkv[0][l].narrow(0, h * D, D); };
    EXPECT_TRUE(torch::equal(vd[0][0][s], head(3)));
    EXPECT_LT(max_abs(kd[0][0][s], fused::rms_norm(head(2), torch::ones({D}), 1e-6)), 1e-6);
    EXPECT_LT(max_abs(q[0][1][l], fused::rms_norm(head(1), torch::ones({D}), 1e-6)), 1e-6);
  }
  EXPECT_EQ(kd[0][0][1].abs().sum().item<double>(), 0);  // slots not named stay untouched
}

}  // namespace
}  // namespace dice::model
