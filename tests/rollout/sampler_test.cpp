// Tests of the batched sampler on a tiny random model (fp32, CPU), against a slow no-cache
// reference loop that recomputes the full block-causal forward at every step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "dice/model/config.h"
#include "dice/model/masks.h"
#include "dice/model/transformer.h"
#include "dice/rollout/sampler.h"

using namespace dice;
using namespace dice::rollout;

namespace {

// The tiny preset with weights scaled up so that distributions are peaked and depend on context
// (at the default init every logit is ~0 and the output barely depends on the prompt).
model::Transformer tiny_model() {
  static model::Transformer m = [] {
    auto cfg = model::ModelConfig::preset("tiny");
    auto w = model::init_random_weights(cfg, 1234);
    for (auto& [name, t] : w) {
      if (name.find("norm") != std::string::npos) continue;
      t.mul_(name == "lm_head.weight" ? 100.0 : 8.0);
    }
    model::Transformer t(cfg, torch::kFloat32, torch::kCPU);
    t->load_weights(w);
    return t;
  }();
  return m;
}

std::vector<std::vector<int64_t>> prompts_of(std::vector<int64_t> lengths, uint64_t seed = 7) {
  std::vector<std::vector<int64_t>> p;
  uint64_t x = seed;
  for (auto L : lengths) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < L; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      v.push_back(static_cast<int64_t>((x >> 33) % 500) + 2);  // avoid stop ids 0/1 and the mask
    }
    p.push_back(v);
  }
  return p;
}

SamplerConfig base_config() {
  SamplerConfig c;
  c.block_size = 4;
  c.steps = 4;
  c.strategy = "static";
  c.temperature = 1.0;
  c.max_new_tokens = 24;
  c.stop_ids = {};
  c.seed = 99;
  c.max_batch = 8;
  c.max_len = 96;
  c.check_every = 3;
  return c;
}

// The slow reference: one sequence, no cache, full block-causal forward every step.
SampleRecord reference(model::Transformer m, const SamplerConfig& c, const std::vector<int64_t>& prompt,
                       uint64_t seq_id) {
  c10::InferenceMode guard;
  const int64_t W = c.block_size, mask_id = m->config().mask_token_id, L = static_cast<int64_t>(prompt.size());
  const Strategy strategy = parse_strategy(c.strategy);
  SamplingParams sp{c.temperature, c.top_k, c.top_p};
  SampleRecord r;
  r.prompt_ids = prompt;
  r.stop_reason = "max_tokens";
  std::vector<int64_t> x(prompt.begin(), prompt.end());
  int64_t pos = L / W * W, global = 0;
  auto seq = torch::tensor(std::vector<int64_t>{static_cast<int64_t>(seq_id)}, torch::kInt64);
  while (true) {
    auto st = BlockState::empty(1, W, mask_id, torch::kCPU);
    const int64_t r0 = L > pos ? L - pos : 0;
    for (int64_t j = 0; j < r0; ++j) {
      st.tokens[0][j] = x[static_cast<size_t>(pos + j)];
      st.masked[0][j] = false;
    }
    st.n_masked_init.fill_(W - r0);
    st.global_step.fill_(global);
    while (st.masked.any().item<bool>()) {
      std::vector<int64_t> ids(x.begin(), x.begin() + pos);
      for (int64_t j = 0; j < W; ++j) ids.push_back(st.tokens[0][j].item<int64_t>());
      const int64_t n = static_cast<int64_t>(ids.size());
      model::ForwardArgs fa;
      fa.ids = torch::tensor(ids, torch::kInt64).unsqueeze(0);
      fa.positions = torch::arange(n, torch::kInt64).unsqueeze(0);
      fa.mask = model::prefill_mask(torch::tensor(std::vector<int64_t>{n}, torch::kInt64), n, W);
      auto logits = m->forward(fa).narrow(1, pos, W);
      auto d = draw_tokens(logits, uniform_noise(c.seed, seq, st.global_step, W), sp, c.record_logprobs);
      apply_step(st, d, torch::ones({1}, torch::kBool), c.steps, strategy, c.threshold);
    }
    global = st.global_step.item<int64_t>();
    x.resize(static_cast<size_t>(pos));
    bool stop = false;
    for (int64_t j = 0; j < W; ++j) {
      const int64_t t = st.tokens[0][j].item<int64_t>();
      x.push_back(t);
      const int64_t p = pos + j;
      if (p < L || p >= L + c.max_new_tokens || stop) continue;
      r.response_ids.push_back(t);
      r.step_map.push_back(st.unmask_step[0][j].item<int64_t>());
      if (c.record_logprobs) r.logprobs.push_back(st.logprob[0][j].item<float>());
      if (std::find(c.stop_ids.begin(), c.stop_ids.end(), t) != c.stop_ids.end()) {
        stop = true;
        r.stop_reason = "stop_token";
      }
    }
    r.steps = global;
    if (stop || pos + W >= L + c.max_new_tokens) break;
    pos += W;
  }
  return r;
}

void expect_same(const SampleRecord& a, const SampleRecord& b, const std::string& what) {
  EXPECT_EQ(a.response_ids, b.response_ids) << what;
  EXPECT_EQ(a.step_map, b.step_map) << what;
  EXPECT_EQ(a.stop_reason, b.stop_reason) << what;
  EXPECT_EQ(a.steps, b.steps) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-3) << what;
}

}  // namespace

TEST(Sampler, CachedBatchEqualsNoCacheReference) {
  auto m = tiny_model();
  auto prompts = prompts_of({1, 3, 4, 5, 8, 11});
  for (std::string strategy : {"static", "dynamic", "sequential"}) {
    auto c = base_config();
    c.strategy = strategy;
    c.threshold = 0.5;
    c.record_logprobs = true;
    Sampler s(m, c);
    auto got = s.generate(prompts);
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto want = reference(m, c, prompts[i], i);
      expect_same(got[i], want, strategy + " prompt " + std::to_string(i));
      EXPECT_EQ(got[i].prompt_ids, prompts[i]);
      EXPECT_EQ(got[i].response_ids.size(), 24u);
    }
  }
}

TEST(Sampler, ResponsesDependOnThePromptAndTheSeed) {
  auto m = tiny_model();
  auto c = base_config();
  auto prompts = prompts_of({6, 6, 6}, 3);
  auto a = Sampler(m, c).generate(prompts);
  auto b = Sampler(m, c).generate(prompts);
  c.seed = 100;
  auto other_seed = Sampler(m, c).generate(prompts);
  std::set<std::vector<int64_t>> distinct;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(a[i].response_ids, b[i].response_ids);
    EXPECT_EQ(a[i].step_map, b[i].step_map);
    distinct.insert(a[i].response_ids);
  }
  EXPECT_EQ(distinct.size(), prompts.size());
  EXPECT_NE(a[0].response_ids, other_seed[0].response_ids);
}

TEST(Sampler, PhaseTimingChangesNothingAndAccountsForTheTime) {
  auto m = tiny_model();
  auto prompts = prompts_of({2, 9, 4, 13, 7});
  for (std::string strategy : {"static", "dynamic"}) {
    auto c = base_config();
    c.strategy = strategy;
    Sampler plain(m, c);
    auto a = plain.generate(prompts);
    EXPECT_EQ(plain.last_stats().model_s, 0.0);  // not measured unless asked
    c.time_phases = true;
    Sampler timed(m, c);
    auto b = timed.generate(prompts);
    for (size_t i = 0; i < prompts.size(); ++i) expect_same(a[i], b[i], strategy + " prompt " + std::to_string(i));
    const auto& st = timed.last_stats();
    EXPECT_GT(st.model_s, 0.0);
    EXPECT_GT(st.draw_s, 0.0);
    EXPECT_GT(st.commit_s, 0.0);
    EXPECT_GT(st.retire_s, 0.0);
    const double parts = st.prefill_s + st.model_s + st.draw_s + st.commit_s + st.retire_s;
    EXPECT_LE(parts, st.wall_s * 1.0001) << strategy;
    EXPECT_GE(parts, st.wall_s * 0.5) << strategy;  // the phases are where the time goes
  }
}

TEST(Sampler, BatchOfMixedLengthsEqualsEachPromptAlone) {
  auto m = tiny_model();
  auto prompts = prompts_of({2, 9, 4, 13, 7});
  for (std::string strategy : {"static", "dynamic"}) {
    auto c = base_config();
    c.strategy = strategy;
    c.threshold = 0.6;
    Sampler batched(m, c);
    auto all = batched.generate(prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
      Sampler alone(m, c);
      auto one = alone.generate({prompts[i]}, i);
      expect_same(all[i], one[0], strategy + " prompt " + std::to_string(i));
    }
  }
}

TEST(Sampler, ContinuousBatchingWithFewRowsGivesTheSameTokens) {
  auto m = tiny_model();
  auto prompts = prompts_of({5, 2, 8, 3, 12, 1, 6});
  auto c = base_config();
  c.strategy = "dynamic";
  c.threshold = 0.6;
  c.stop_ids = {7, 40, 300};
  auto wide = Sampler(m, c).generate(prompts);
  c.max_batch = 2;
  Sampler narrow(m, c);
  int64_t last_done = 0;
  auto got = narrow.generate(prompts, 0, [&](int64_t done, int64_t total) {
    EXPECT_GT(done, last_done);
    EXPECT_EQ(total, 7);
    last_done = done;
  });
  EXPECT_EQ(last_done, 7);
  for (size_t i = 0; i < prompts.size(); ++i) expect_same(got[i], wide[i], "prompt " + std::to_string(i));
}

TEST(Sampler, StaticUnmasksExactlyTheScheduleEachStep) {
  auto m = tiny_model();
  for (int64_t steps : {4, 2, 1}) {
    auto c = base_config();
    c.steps = steps;
    auto prompts = prompts_of({8, 4});  // block-aligned: every response block is fully generated
    auto got = Sampler(m, c).generate(prompts);
    for (const auto& r : got) {
      std::map<int64_t, int> per_step;
      for (auto s : r.step_map) per_step[s]++;
      EXPECT_EQ(static_cast<int64_t>(per_step.size()), 6 * steps);  // 24 tokens = 6 blocks
      for (auto& [step, count] : per_step) EXPECT_EQ(count, 4 / steps) << "step " << step;
      EXPECT_EQ(r.steps, 6 * steps);
    }
  }
}

TEST(Sampler, DynamicNeverUnmasksFewerThanTheSchedule) {
  auto m = tiny_model();
  auto c = base_config();
  c.strategy = "dynamic";
  c.threshold = 0.3;
  c.steps = 2;  // schedule: 2 tokens per step
  auto got = Sampler(m, c).generate(prompts_of({4, 8, 12}));
  bool some_fast = false;
  for (const auto& r : got) {
    for (size_t b = 0; b < r.step_map.size(); b += 4) {
      std::map<int64_t, int> per_step;
      for (size_t j = b; j < b + 4; ++j) per_step[r.step_map[j]]++;
      EXPECT_LE(per_step.size(), 2u);
      int remaining = 4;  // the schedule's 2 per step, or whatever is left
      for (auto& [step, count] : per_step) {
        EXPECT_GE(count, std::min(2, remaining));
        remaining -= count;
      }
      some_fast = some_fast || per_step.size() == 1;
    }
  }
  EXPECT_TRUE(some_fast) << "threshold 0.3 should finish some block in one step";
}

TEST(Sampler, StepMapsAreConsistent) {
  auto m = tiny_model();
  auto c = base_config();
  c.strategy = "dynamic";
  c.threshold = 0.5;
  c.max_new_tokens = 22;
  auto prompts = prompts_of({3, 6, 1});
  auto got = Sampler(m, c).generate(prompts);
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& r = got[i];
    ASSERT_EQ(r.step_map.size(), r.response_ids.size());
    EXPECT_EQ(r.response_ids.size(), 22u);
    EXPECT_EQ(r.stop_reason, "max_tokens");
    // blocks on the absolute grid: the first holds the prompt's tail
    const int64_t L = static_cast<int64_t>(prompts[i].size());
    int64_t prev_max = -1;
    for (int64_t start = 0; start < static_cast<int64_t>(r.step_map.size());) {
      const int64_t end = std::min<int64_t>(static_cast<int64_t>(r.step_map.size()), (L + start) / 4 * 4 + 4 - L);
      int64_t lo = INT64_MAX, hi = -1;
      for (int64_t j = start; j < end; ++j) {
        EXPECT_GE(r.step_map[j], 0);
        EXPECT_LT(r.step_map[j], r.steps);
        lo = std::min(lo, r.step_map[j]);
        hi = std::max(hi, r.step_map[j]);
      }
      EXPECT_GT(lo, prev_max) << "steps must increase block by block";
      prev_max = hi;
      start = end;
    }
  }
}

TEST(Sampler, StopTokensEndOnlyTheirOwnSequence) {
  auto m = tiny_model();
  auto c = base_config();
  c.max_new_tokens = 40;
  c.max_len = 64;
  auto prompts = prompts_of({5, 6, 7, 8});
  auto free_run = Sampler(m, c).generate(prompts);
  // A stop id that occurs in sequence 0's response but not in sequence 1's.
  int64_t stop = -1;
  for (size_t j = 4; j < free_run[0].response_ids.size() && stop < 0; ++j) {
    const int64_t t = free_run[0].response_ids[j];
    const auto& other = free_run[1].response_ids;
    if (std::find(other.begin(), other.end(), t) == other.end()) stop = t;
  }
  ASSERT_GE(stop, 0);
  c.stop_ids = {stop};
  auto got = Sampler(m, c).generate(prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& full = free_run[i].response_ids;
    auto it = std::find(full.begin(), full.end(), stop);
    if (it == full.end()) {
      expect_same(got[i], free_run[i], "sequence without the stop id " + std::to_string(i));
    } else {
      std::vector<int64_t> want(full.begin(), it + 1);
      EXPECT_EQ(got[i].response_ids, want) << i;
      EXPECT_EQ(got[i].stop_reason, "stop_token");
      EXPECT_EQ(got[i].step_map, std::vector<int64_t>(free_run[i].step_map.begin(),
                                                      free_run[i].step_map.begin() + static_cast<long>(want.size())));
    }
  }
  EXPECT_EQ(got[0].stop_reason, "stop_token");
  EXPECT_LT(got[0].response_ids.size(), free_run[0].response_ids.size());
  EXPECT_EQ(got[1].stop_reason, "max_tokens");
  EXPECT_EQ(got[1].response_ids, free_run[1].response_ids);
}

TEST(Sampler, GreedyAndTopKTopPAgreeWithTheReference) {
  auto m = tiny_model();
  auto prompts = prompts_of({6, 3});
  for (auto [t, k, p] : std::vector<std::tuple<double, int64_t, double>>{{0.0, 0, 1.0}, {0.7, 20, 0.9}, {1.3, 0, 0.8}}) {
    auto c = base_config();
    c.temperature = t;
    c.top_k = k;
    c.top_p = p;
    auto got = Sampler(m, c).generate(prompts);
    for (size_t i = 0; i < prompts.size(); ++i) expect_same(got[i], reference(m, c, prompts[i], i), "sampling");
  }
}

TEST(Sampler, ReleaseFreesTheCacheAndGenerationStillWorks) {
  auto m = tiny_model();
  auto c = base_config();
  Sampler s(m, c);
  auto prompts = prompts_of({5});
  auto a = s.generate(prompts);
  EXPECT_GT(s.cache_bytes(), 0);
  s.release();
  auto b = s.generate(prompts);
  EXPECT_EQ(a[0].response_ids, b[0].response_ids);
  EXPECT_GT(s.last_stats().forwards, 0);
  EXPECT_EQ(s.last_stats().response_tokens, 24);
}

TEST(Sampler, BadRequestsAreClearErrors) {
  auto m = tiny_model();
  auto c = base_config();
  Sampler s(m, c);
  EXPECT_THROW(s.generate({{}}), Error);
  EXPECT_THROW(s.generate({{5, 600}}), Error);  // outside the tiny vocabulary
  try {
    s.generate({std::vector<int64_t>(80, 5)});  // 80 + 24 > max_len 96
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_len"), std::string::npos) << e.what();
  }
  auto bad = c;
  bad.steps = 0;
  EXPECT_THROW(Sampler(m, bad), Error);
  bad = c;
  bad.strategy = "random";
  EXPECT_THROW(Sampler(m, bad), Error);
}

TEST(Sampler, FixedShapeBucketsCoverTheirInputs) {
  EXPECT_EQ(graph_rows(1, 128), 1);
  EXPECT_EQ(graph_rows(3, 128), 4);
  EXPECT_EQ(graph_rows(9, 128), 16);
  EXPECT_EQ(graph_rows(17, 128), 32);
  EXPECT_EQ(graph_rows(100, 128), 112);
  EXPECT_EQ(graph_rows(100, 100), 100);
  EXPECT_EQ(graph_rows(3, 2), 2);  // never more rows than the cache has
  for (int64_t n = 1; n <= 130; ++n) EXPECT_GE(graph_rows(n, 1 << 20), n);
  EXPECT_EQ(graph_span(4, 128, 6144), 128);
  EXPECT_EQ(graph_span(128, 128, 6144), 128);
  EXPECT_EQ(graph_span(129, 128, 6144), 256);
  EXPECT_EQ(graph_span(6100, 128, 6144), 6144);
}

// cuda_graphs (on a GPU) and fixed_shapes run each decode step in a fixed shape (padded rows, bucketed key span, always a
// mask); on the CPU that path runs eagerly and must give exactly the tokens of the plain one.
// sampler.fused (packed GEMMs + fused operators; PyTorch fallbacks on this CPU) decodes the same
// tokens with the same step maps, eagerly and in fixed shapes.
TEST(Sampler, FusedForwardsGiveTheSameTokens) {
  auto m = tiny_model();
  auto prompts = prompts_of({2, 9, 13, 5});
  for (std::string strategy : {"static", "dynamic"}) {
    auto c = base_config();
    c.strategy = strategy;
    c.threshold = 0.6;
    c.record_logprobs = true;
    c.fused = false;
    auto want = Sampler(m, c).generate(prompts);
    c.fused = true;
    auto got = Sampler(m, c).generate(prompts);
    c.fixed_shapes = true;
    auto got_fixed = Sampler(m, c).generate(prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
      expect_same(got[i], want[i], strategy + " fused, prompt " + std::to_string(i));
      expect_same(got_fixed[i], want[i], strategy + " fused fixed shapes, prompt " + std::to_string(i));
    }
  }
}

TEST(Sampler, FixedShapeForwardsGiveTheSameTokens) {
  auto m = tiny_model();
  auto warm = prompts_of({3, 3, 3, 3, 3, 3, 3, 3}, 11);  // 8 cache rows: later batches of 3 pad to 4
  auto prompts = prompts_of({2, 9, 13});
  for (std::string strategy : {"static", "dynamic"}) {
    auto c = base_config();
    c.strategy = strategy;
    c.threshold = 0.6;
    c.record_logprobs = true;
    c.stop_ids = {7, 40, 300};
    Sampler plain(m, c);
    auto want = plain.generate(prompts);
    c.fixed_shapes = true;
    c.graph_span_step = 8;  // several span buckets within 24 new tokens
    Sampler fixed(m, c);
    fixed.generate(warm);
    auto got = fixed.generate(prompts);
    for (size_t i = 0; i < prompts.size(); ++i) expect_same(got[i], want[i], strategy + " prompt " + std::to_string(i));
    EXPECT_EQ(fixed.last_stats().graph_replays, 0);  // no CUDA here: the fixed shapes ran eagerly
    // continuous batching: rows leave and join while the shapes stay bucketed
    auto many = prompts_of({5, 2, 8, 3, 12, 1, 6});
    c.max_batch = 3;
    auto fixed_few = Sampler(m, c).generate(many);
    c.fixed_shapes = false;
    auto plain_few = Sampler(m, c).generate(many);
    for (size_t i = 0; i < many.size(); ++i)
      expect_same(fixed_few[i], plain_few[i], strategy + " continuous, prompt " + std::to_string(i));
  }
}

// The tail: the final block's decoded tokens past the response (past the stop token, or past
// max_new_tokens) complete the sequence to the end of its final block on the grid, with their
// unmask steps and log-probs; they are the tokens a run without stop ids decodes there.
TEST(Sampler, TailCompletesTheFinalBlock) {
  auto m = tiny_model();
  auto prompts = prompts_of({5, 6, 7, 8, 9, 10, 11, 12}, 21);  // every prompt length mod 4, twice
  std::vector<int64_t> many_stops;  // one id in five: most sequences stop within a few blocks
  for (int64_t t = 0; t < 511; t += 5) many_stops.push_back(t);
  const auto is_stop = [&](int64_t t) { return std::find(many_stops.begin(), many_stops.end(), t) != many_stops.end(); };
  int stopped_with_tail = 0, cut_with_tail = 0, tail_before_kept = 0;
  for (std::string strategy : {"static", "dynamic"}) {
    for (bool fixed : {false, true}) {
      auto c = base_config();
      c.strategy = strategy;
      c.threshold = 0.6;
      c.record_logprobs = true;
      c.max_new_tokens = 22;  // not a multiple of the block: a cut leaves a tail too
      c.fixed_shapes = fixed;
      c.graph_span_step = 8;
      auto free_run = Sampler(m, c).generate(prompts);
      c.stop_ids = many_stops;
      auto got = Sampler(m, c).generate(prompts);
      for (size_t i = 0; i < prompts.size(); ++i) {
        const std::string what = strategy + (fixed ? " fixed shapes" : "") + ", prompt " + std::to_string(i);
        const auto& r = got[i];
        const int64_t L = static_cast<int64_t>(r.prompt_ids.size()), R = static_cast<int64_t>(r.response_ids.size());
        const int64_t total = L + R + static_cast<int64_t>(r.tail_ids.size());
        ASSERT_GT(R, 0) << what;
        EXPECT_EQ(total % 4, 0) << what;
        EXPECT_EQ((L + R - 1) / 4, (total - 1) / 4) << what << ": the tail lies in the response's last block";
        ASSERT_EQ(r.tail_steps.size(), r.tail_ids.size()) << what;
        ASSERT_EQ(r.tail_logprobs.size(), r.tail_ids.size()) << what;
        for (auto s : r.tail_steps) {
          EXPECT_GE(s, 0) << what;
          EXPECT_LT(s, r.steps) << what;
        }
        if (r.stop_reason == "stop_token") {
          EXPECT_TRUE(is_stop(r.response_ids.back())) << what;
          for (int64_t j = 0; j + 1 < R; ++j) EXPECT_FALSE(is_stop(r.response_ids[j])) << what << " token " << j;
          stopped_with_tail += !r.tail_ids.empty();
        } else {
          EXPECT_EQ(r.stop_reason, "max_tokens") << what;
          EXPECT_EQ(R, 22) << what;
          EXPECT_EQ(total, (L + 22 + 3) / 4 * 4) << what;
          cut_with_tail += !r.tail_ids.empty();
        }
        // A tail token unmasked before a kept token of its block was context for that draw.
        const int64_t block_start = (total - 4) - L;  // in response indices (may be negative)
        for (auto ts : r.tail_steps)
          for (int64_t j = std::max<int64_t>(block_start, 0); j < R; ++j) tail_before_kept += ts < r.step_map[j];
        // The tail is what decoding without stop ids puts there (same noise, same context).
        std::vector<int64_t> ids = r.response_ids, steps = r.step_map, free_ids = free_run[i].response_ids,
                             free_steps = free_run[i].step_map;
        ids.insert(ids.end(), r.tail_ids.begin(), r.tail_ids.end());
        steps.insert(steps.end(), r.tail_steps.begin(), r.tail_steps.end());
        free_ids.insert(free_ids.end(), free_run[i].tail_ids.begin(), free_run[i].tail_ids.end());
        free_steps.insert(free_steps.end(), free_run[i].tail_steps.begin(), free_run[i].tail_steps.end());
        ASSERT_LE(ids.size(), free_ids.size()) << what;
        EXPECT_EQ(ids, std::vector<int64_t>(free_ids.begin(), free_ids.begin() + static_cast<long>(ids.size()))) << what;
        EXPECT_EQ(steps, std::vector<int64_t>(free_steps.begin(), free_steps.begin() + static_cast<long>(steps.size())))
            << what;
        for (size_t j = 0; j < r.tail_logprobs.size(); ++j) {
          const size_t k = r.response_ids.size() + j;
          const float want = k < free_run[i].logprobs.size() ? free_run[i].logprobs[k]
                                                             : free_run[i].tail_logprobs[k - free_run[i].logprobs.size()];
          EXPECT_NEAR(r.tail_logprobs[j], want, 1e-3) << what << " tail " << j;
        }
      }
    }
  }
  EXPECT_GT(stopped_with_tail, 0) << "some sequence should stop before the end of its block";
  EXPECT_GT(cut_with_tail, 0) << "some sequence should reach max_new_tokens inside a block";
  EXPECT_GT(tail_before_kept, 0) << "some tail token should precede a kept token of its block";
  // Without record_logprobs there are no tail log-probs (as there are no response log-probs).
  auto c = base_config();
  c.max_new_tokens = 22;
  auto plain = Sampler(m, c).generate(prompts);
  for (const auto& r : plain) {
    EXPECT_TRUE(r.logprobs.empty());
    EXPECT_TRUE(r.tail_logprobs.empty());
    EXPECT_EQ(r.tail_steps.size(), r.tail_ids.size());
  }
}
