// `dice bench sample`: tokens/s of the block-diffusion sampler at SDAR shapes (random weights),
// beside a straightforward PyTorch SDAR loop (tools/gpu/sampler_peer.py) run in the same call,
// and beside the roofline (weights + KV bytes per forward / HBM bandwidth; FLOPs / bf16 peak).
// `--greedy-check` compares greedy tokens with the peer's on one shared random model instead.
// `--op-profile` counts the ATen operators one decode step dispatches (what a CUDA graph replays).
//   dice/rollout/sampler.h   the sampler
//   dice/model/*             model shapes, random weights, HF folder writer
#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dice/bench/bench.h"
#include "dice/model/config.h"
#include "dice/model/fused_ops.h"
#include "dice/model/safetensors.h"
#include "dice/model/transformer.h"
#include "dice/rollout/sampler.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"
#include "dice/util/torch_compat.h"

namespace dice::bench {
namespace {

struct SampleBenchArgs {
  std::vector<std::string> shapes = {"sdar-1.7b", "sdar-4b"};
  std::vector<int64_t> batches = {1, 32, 128};
  std::vector<std::string> strategies = {"static", "dynamic"};
  int64_t prompt_len = 512;
  int64_t max_new = 4096;
  int64_t max_new_large = 0;  // batches >= 32 (0 = max_new)
  int64_t peer_max_new = 0;   // 0 = same as dice
  double temperature = 1.0;
  bool peer = true;
  std::string peer_script = std::string(DICE_SOURCE_DIR) + "/tools/gpu/sampler_peer.py";
  std::string python = DICE_PYTHON;
  std::string json_out;
  bool greedy_check = false;
  bool op_profile = false;
  std::string fused = "on";  // sampler.fused: off | on | both (a row each)
  std::string work_dir = "/tmp/dice-bench-sample";
  int64_t check_every = 8;
  int64_t phase_new = 256;  // new tokens of the extra phase-timed run (0 = none)
  std::string graphs = "both";  // sampler.cuda_graphs: off | on | both (a row each)
  bool no_cudnn_sdpa = false;   // SDPA without its cuDNN backend (compare attention kernels)
  bool no_decode_kernel = false;  // sampler.fused's block-decode attention through SDPA instead
  double hbm_bytes_per_s = 4.8e12;
  double peak_flops = 790e12;
};

// A model of the shape with N(0, 0.02^2) matrices (norms 1), made on the device (fast at GPU sizes).
model::Transformer random_model(const std::string& shape, torch::Dtype dtype, torch::Device dev, uint64_t seed,
                                bool round_to_bf16) {
  torch::NoGradGuard ng;
  auto cfg = model::ModelConfig::preset(shape);
  model::Transformer m(cfg, dtype, dev);
  torch::manual_seed(seed);
  for (auto& p : m->named_parameters(true)) {
    if (p.key().find("norm") != std::string::npos) p.value().fill_(1.0);
    else p.value().normal_(0.0, 0.02);
    if (round_to_bf16) p.value().copy_(p.value().to(torch::kBFloat16));
  }
  return m;
}

// Static lockstep schedule at batch B: per block, `steps` denoising forwards (lm_head on the block)
// and one commit forward (no lm_head), every forward over B x W tokens; KV read = all slots so far.
struct Roofline {
  double seconds = 0, bytes = 0, flops = 0;
};
Roofline roofline(const model::ModelConfig& c, int64_t B, int64_t prompt_len, int64_t max_new, int64_t W, int64_t steps,
                  double bw, double peak) {
  const double elt = 2;  // bf16
  const double layer_params = c.num_hidden_layers * (c.hidden_size * (c.num_attention_heads + 2 * c.num_key_value_heads) *
                                                     c.head_dim + c.num_attention_heads * c.head_dim * c.hidden_size +
                                                     3.0 * c.hidden_size * c.intermediate_size);
  const double head_params = static_cast<double>(c.vocab_size) * c.hidden_size;
  const double kv_per_token = 2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * elt;
  Roofline r;
  const int64_t first = prompt_len / W * W;
  for (int64_t pos = first; pos < prompt_len + max_new; pos += W) {
    const double span = static_cast<double>(pos + W);
    for (int64_t f = 0; f <= steps; ++f) {
      const bool commit = f == steps;
      const double params = layer_params + (commit ? 0 : head_params);
      const double tokens = static_cast<double>(B * W);
      const double bytes = params * elt + B * span * kv_per_token;
      const double attn = 4.0 * tokens * span * c.num_attention_heads * c.head_dim * c.num_hidden_layers;
      const double flops = 2.0 * params * tokens + attn;
      r.bytes += bytes;
      r.flops += flops;
      r.seconds += std::max(bytes / bw, flops / peak);
    }
  }
  return r;
}

std::vector<std::vector<int64_t>> random_prompts(int64_t B, int64_t L, uint64_t seed, int64_t vocab = 151643) {
  const uint64_t top = static_cast<uint64_t>(std::min<int64_t>(vocab - 2, 151643));  // below the special ids
  std::vector<std::vector<int64_t>> p(static_cast<size_t>(B));
  uint64_t x = seed;
  for (auto& v : p)
    for (int64_t i = 0; i < L; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      v.push_back(static_cast<int64_t>((x >> 33) % top));
    }
  return p;
}

void run_throughput(const SampleBenchArgs& a) {
  const auto dev = bench_device();
  const auto dtype = dev.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  if (!dev.is_cuda()) log::warn("bench sample: no GPU; running on CPU (numbers are not meaningful)");
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-10s %5s %-14s %7s %11s %11s %7s %11s %7s\n", "shape", "batch", "strategy", "new", "dice tok/s",
              "peer tok/s", "ratio", "roof tok/s", "of roof");
  auto max_new_for = [&](int64_t B) { return (B >= 32 && a.max_new_large > 0) ? a.max_new_large : a.max_new; };
  for (const auto& shape : a.shapes) {
    // The peers first, while this process holds no GPU memory.
    std::vector<double> peer_tps(a.batches.size(), 0.0);
    std::vector<std::string> peer_impl(a.batches.size());
    for (size_t bi = 0; a.peer && bi < a.batches.size(); ++bi) {
      const int64_t B = a.batches[bi], max_new = max_new_for(B);
      const int64_t pn = a.peer_max_new > 0 ? std::min(a.peer_max_new, max_new) : max_new;
      std::string cmd = str(a.python, " ", a.peer_script, " --mode bench --shape ", shape, " --batch ", B,
                            " --prompt-len ", a.prompt_len, " --max-new ", pn, " --temperature ", a.temperature, " 2>&1");
      auto j = last_json_line(run_capture(cmd, "The peer"), "The peer");
      peer_tps[bi] = j["tokens_per_s"].get<double>();
      peer_impl[bi] = j["impl"].get<std::string>();
      log::info("bench sample: peer ", shape, " batch ", B, ": ", peer_tps[bi], " tok/s (", peer_impl[bi], ", ", pn,
                " new tokens)");
    }
    Timer mt;
    auto m = random_model(shape, dtype, dev, 1, false);
    log::info("bench sample: ", shape, " random weights on ", dev.str(), " in ", mt.elapsed_s(), " s");
    for (size_t bi = 0; bi < a.batches.size(); ++bi) {
      const int64_t B = a.batches[bi], max_new = max_new_for(B);
      const double ptps = peer_tps[bi];
      std::vector<std::tuple<std::string, bool, bool>> runs;  // (strategy, cuda_graphs, fused)
      for (const auto& strategy : a.strategies)
        for (bool fused : {false, true}) {
          if ((fused && a.fused == "off") || (!fused && a.fused == "on")) continue;
          if (a.graphs != "on") runs.emplace_back(strategy, false, fused);
          if (a.graphs != "off" && dev.is_cuda()) runs.emplace_back(strategy, true, fused);
        }
      for (const auto& [strategy, graphs, fused] : runs) {
        rollout::SamplerConfig c;
        c.cuda_graphs = graphs;
        c.fused = fused;
        c.block_size = 4;
        c.steps = 4;
        c.strategy = strategy;
        c.threshold = 0.9;
        c.temperature = a.temperature;
        c.max_new_tokens = max_new;
        c.stop_ids = {};
        c.max_batch = B;
        c.max_len = (a.prompt_len + max_new + 3) / 4 * 4;
        c.check_every = a.check_every;
        {  // warm-up (kernels, allocator) on a short run
          auto wc = c;
          wc.max_new_tokens = 16;
          wc.max_len = 128;
          rollout::Sampler(m, wc).generate(random_prompts(B, 64, 3, m->config().vocab_size), 0);
        }
        rollout::Sampler s(m, c);
        auto prompts = random_prompts(B, a.prompt_len, 11, m->config().vocab_size);
        int64_t captured = 0;
        if (graphs) {  // capture every shape of this run once (a sampler reused across RL steps keeps them)
          s.generate(prompts, 0);
          captured = s.last_stats().graphs_captured;
        }
        if (dev.is_cuda()) torch::cuda::synchronize();
        Timer t;
        auto recs = s.generate(prompts, 0);
        if (dev.is_cuda()) torch::cuda::synchronize();
        const double sec = t.elapsed_s();
        int64_t tokens = 0;
        for (const auto& r : recs) tokens += static_cast<int64_t>(r.response_ids.size());
        const double tps = tokens / sec;
        auto roof = roofline(m->config(), B, a.prompt_len, max_new, 4, 4, a.hbm_bytes_per_s, a.peak_flops);
        const double roof_tps = B * max_new / roof.seconds;
        const std::string label = strategy + (graphs ? "+graphs" : "") + (fused ? "+fused" : "");
        std::printf("%-10s %5ld %-14s %7ld %11.1f %11.1f %6.2fx %11.1f %6.1f%%", shape.c_str(), static_cast<long>(B),
                    label.c_str(), static_cast<long>(max_new), tps, ptps, ptps > 0 ? tps / ptps : 0.0, roof_tps,
                    100.0 * tps / roof_tps);
        if (graphs)
          std::printf("  (%ld graphs captured in a first run; %ld of %ld forwards replayed)", static_cast<long>(captured),
                      static_cast<long>(s.last_stats().graph_replays), static_cast<long>(s.last_stats().forwards));
        std::printf("\n");
        std::fflush(stdout);
        results.push_back({{"shape", shape}, {"batch", B}, {"strategy", strategy}, {"cuda_graphs", graphs},
                           {"fused", fused},
                           {"graphs_captured", captured}, {"graph_replays", s.last_stats().graph_replays},
                           {"prompt_len", a.prompt_len},
                           {"max_new", max_new}, {"tokens", tokens}, {"seconds", sec}, {"tokens_per_s", tps},
                           {"forwards", s.last_stats().forwards}, {"prefill_s", s.last_stats().prefill_s},
                           {"peer_tokens_per_s", ptps}, {"peer_impl", peer_impl[bi]},
                           {"ratio", ptps > 0 ? tps / ptps : 0.0}, {"roofline_tokens_per_s", roof_tps},
                           {"roofline_fraction", tps / roof_tps}, {"roofline_bytes", roof.bytes},
                           {"roofline_flops", roof.flops}});
        s.release();
        if (a.phase_new > 0) {  // where the time goes: a separate, synchronised run
          auto pc = c;
          pc.max_new_tokens = std::min(max_new, a.phase_new);
          pc.max_len = (a.prompt_len + pc.max_new_tokens + 3) / 4 * 4;
          pc.time_phases = true;
          rollout::Sampler ps(m, pc);
          if (graphs) ps.generate(prompts, 0);  // captures first, as above
          ps.generate(prompts, 0);
          const auto& st = ps.last_stats();
          const double total = st.wall_s > 0 ? st.wall_s : 1;
          auto pct = [&](double x) { return 100.0 * x / total; };
          // A replayed graph is the whole step (forward, draw, bookkeeping): one phase.
          std::printf("    phases (%ld new tokens, synchronised, %.2f s): prefill %.1f%% | %s %.1f%% (%.2f ms/forward, %ld "
                      "forwards) | draw+unmask %.1f%% | block bookkeeping %.1f%% | retire %.1f%%\n",
                      static_cast<long>(pc.max_new_tokens), st.wall_s, pct(st.prefill_s),
                      graphs ? "model+draw+bookkeeping (graph)" : "model", pct(st.model_s),
                      st.forwards ? 1e3 * st.model_s / st.forwards : 0.0, static_cast<long>(st.forwards), pct(st.draw_s),
                      pct(st.commit_s), pct(st.retire_s));
          std::fflush(stdout);
          results.back()["phases"] = {{"max_new", pc.max_new_tokens}, {"wall_s", st.wall_s}, {"prefill_s", st.prefill_s},
                                      {"model_s", st.model_s}, {"draw_s", st.draw_s}, {"commit_s", st.commit_s},
                                      {"retire_s", st.retire_s}, {"forwards", st.forwards}};
          ps.release();
        }
      }
    }
  }
  if (!a.json_out.empty()) fs::write_file_atomic(a.json_out, results.dump(1) + "\n");
}

// Greedy tokens of dice == the peer's on one random model (fp32 compute, bf16-exact weights), for
// prompts of several lengths (the first decode block holds 0..3 prompt tokens) decoded as one batch
// by dice and one at a time by the peer.
// The bf16 build of the fused kernels: a prefill forward into a KV cache (40 rows x 96 tokens,
// bidirectional), then a decode step of rows at different lengths (all 40 rows, and 4 rows so
// the attention kernel splits the keys), each with the same bf16-representable weights, plain
// bf16 and fused bf16 against the fp32 plain forward. Summing in another order moves bf16 results a little, so the check is
// that the fused path is about as close to fp32 as the plain path (a wrong kernel is far off).
// Then the sampling kernel against the same draw in PyTorch ops (softmax, cumsum, searchsorted).
bool check_fused_bf16(const std::string& shape, torch::Device dev) {
  torch::NoGradGuard ng;
  auto m32 = random_model(shape, torch::kFloat32, dev, 7, true);
  const auto& cfg = m32->config();
  model::Transformer m16(cfg, torch::kBFloat16, dev);
  {
    auto from = m32->named_parameters(true);
    for (auto& p : m16->named_parameters(true)) p.value().copy_(from[p.key()]);
  }
  // 40 rows: the decode below then fills the GPU without splitting the keys; its 4-row view splits.
  const int64_t B = 40, L = 96, W = 4;
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  auto ids = torch::randint(0, cfg.vocab_size, {B, L}, i64);
  model::KVCache c32(cfg, B, 128, torch::kFloat32, dev), cp(cfg, B, 128, torch::kBFloat16, dev),
      cf(cfg, B, 128, torch::kBFloat16, dev);
  auto run = [&](model::Transformer& m, model::KVCache& cache, bool fused, const torch::Tensor& in,
                 const torch::Tensor& pos, const torch::Tensor& kv_lengths) {
    model::ForwardArgs fa;
    fa.ids = in;
    fa.positions = pos;
    fa.cache = &cache;
    fa.kv_span = L;
    fa.kv_lengths = kv_lengths;
    fa.fused = fused;
    return m->forward(fa).to(torch::kFloat32).reshape({in.numel(), -1});
  };
  bool all_close = true;
  torch::Tensor plain_logits;
  auto compare = [&](const char* what, const torch::Tensor& ref, const torch::Tensor& plain, const torch::Tensor& fused) {
    auto err = [&](const torch::Tensor& x) { return (x - ref).abs().mean().item<double>(); };
    auto agree = [&](const torch::Tensor& x) {
      return x.argmax(-1).eq(ref.argmax(-1)).to(torch::kFloat32).mean().item<double>();
    };
    const double e_plain = err(plain), e_fused = err(fused), a_plain = agree(plain), a_fused = agree(fused);
    const bool close = e_fused <= 1.5 * e_plain && a_fused >= a_plain - 0.03;
    std::printf("fused bf16 %s (%s, %s, against fp32): mean |logit error| plain %.4g, fused %.4g; argmax agrees with "
                "fp32 at plain %.1f%%, fused %.1f%%\n",
                close ? "PASS" : "FAIL", shape.c_str(), what, e_plain, e_fused, 100 * a_plain, 100 * a_fused);
    all_close = all_close && close;
  };
  {
    auto pos = torch::arange(L, i64).expand({B, L});
    torch::Tensor none;
    auto ref = run(m32, c32, false, ids, pos, none);
    plain_logits = run(m16, cp, false, ids, pos, none);
    compare("prefill 40 x 96 tokens", ref, plain_logits, run(m16, cf, true, ids, pos, none));
  }
  // A decode step of rows at different lengths (kv_lengths; fused: the decode-attention kernel).
  auto start = 20 + torch::arange(B, i64).mul(7).remainder(L - 20 - W + 1);
  auto block = torch::randint(0, cfg.vocab_size, {B, W}, i64);
  for (int64_t rows : {B, int64_t{4}}) {
    auto v32 = c32.rows(0, rows), vp = cp.rows(0, rows), vf = cf.rows(0, rows);
    auto st = start.narrow(0, 0, rows), in = block.narrow(0, 0, rows);
    auto pos = st.unsqueeze(1) + torch::arange(W, i64).unsqueeze(0), lens = st + W;
    compare(rows == B ? "decode 40 rows x 4 tokens" : "decode 4 rows x 4 tokens (keys split)", run(m32, v32, false, in, pos, lens),
            run(m16, vp, false, in, pos, lens), run(m16, vf, true, in, pos, lens));
  }

  auto rows = plain_logits.narrow(0, 0, 384).to(torch::kBFloat16);
  auto u = torch::rand({rows.size(0)}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
  auto [tok, prob] = model::fused::sample_rows(rows, u, 0.7);
  auto probs = (rows.to(torch::kFloat32) / 0.7).softmax(-1);
  auto cdf = probs.cumsum(-1);
  auto want = torch::searchsorted(cdf, u.to(torch::kFloat32).unsqueeze(-1) * cdf.narrow(-1, cdf.size(-1) - 1, 1),
                                  /*out_int32=*/false, /*right=*/true)
                  .clamp_max(cdf.size(-1) - 1);
  // Where the two draws differ, the probability mass between them: fp32 sums over ~150k
  // elements in another order shift a cumulative sum by about 1e-5, a few tokens' worth.
  const double gap = (cdf.gather(-1, tok.unsqueeze(-1)) - cdf.gather(-1, want)).abs().max().item<double>();
  const double same = tok.eq(want.squeeze(-1)).to(torch::kFloat32).mean().item<double>();
  const double prob_diff = (prob - probs.gather(-1, tok.unsqueeze(-1)).squeeze(-1)).abs().max().item<double>();
  const bool draws_ok = gap < 1e-3 && prob_diff < 1e-4;
  std::printf("sample_rows %s (%s, %ld rows, T 0.7, against PyTorch ops): same token %.2f%%, largest mass between "
              "differing draws %.3g, probability max |diff| %.3g\n",
              draws_ok ? "PASS" : "FAIL", model::fused::have_cuda_kernels() && dev.is_cuda() ? "kernel" : "fallback",
              static_cast<long>(rows.size(0)), 100 * same, gap, prob_diff);
  std::fflush(stdout);
  return all_close && draws_ok;
}

void run_greedy_check(const SampleBenchArgs& a) {
  const auto dev = bench_device();
  const std::string shape = a.shapes.empty() ? "sdar-1.7b" : a.shapes[0];
  const std::string dir = a.work_dir + "/" + shape;
  const int64_t max_new = a.max_new;
  auto m = random_model(shape, torch::kFloat32, dev, 5, true);
  {
    Timer t;
    std::string cmd = "mkdir -p '" + dir + "'";
    DICE_REQUIRE(std::system(cmd.c_str()) == 0, "Could not create ", dir);
    model::save_hf_weights(dir, m->state_dict(torch::kBFloat16));
    fs::write_file(dir + "/config.json", m->config().to_json());
    log::info("bench sample: wrote ", shape, " random weights to ", dir, " in ", t.elapsed_s(), " s");
  }
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t L : {37, 64, 101, 130}) prompts.push_back(random_prompts(1, L, 100 + L, m->config().vocab_size)[0]);
  rollout::SamplerConfig c;
  c.strategy = "static";
  c.temperature = 0;
  c.max_new_tokens = max_new;
  c.stop_ids = {};
  c.max_batch = static_cast<int64_t>(prompts.size());
  c.max_len = 130 + max_new + 8;
  c.cuda_graphs = false;  // the plain path first; the graph path below
  c.fused = false;       // and the fused one after
  rollout::Sampler s(m, c);
  auto recs = s.generate(prompts);
  std::vector<rollout::SampleRecord> graph_recs;
  if (dev.is_cuda()) {  // the fixed-shape forwards replayed as CUDA graphs must give the same tokens
    auto gc = c;
    gc.cuda_graphs = true;
    rollout::Sampler gs(m, gc);
    graph_recs = gs.generate(prompts);
    std::printf("greedy with CUDA graphs: %ld graphs captured, %ld of %ld forwards replayed\n",
                static_cast<long>(gs.last_stats().graphs_captured), static_cast<long>(gs.last_stats().graph_replays),
                static_cast<long>(gs.last_stats().forwards));
  }
  std::vector<rollout::SampleRecord> fused_recs;
  if (a.fused != "off") {  // fused kernels round like HF but reduce fp32 sums in another order
    auto fc = c;
    fc.cuda_graphs = dev.is_cuda();
    fc.fused = true;
    fused_recs = rollout::Sampler(m, fc).generate(prompts);
  }

  nlohmann::json pj = prompts;
  fs::write_file(dir + "/prompts.json", pj.dump());
  std::string cmd = str(a.python, " ", a.peer_script, " --mode greedy --model-dir ", dir, " --prompts ", dir,
                        "/prompts.json --max-new ", max_new, " --dtype float32 --out ", dir, "/peer.json 2>&1");
  run_capture(cmd, "The peer");
  auto peer = nlohmann::json::parse(fs::read_file(dir + "/peer.json"));
  // Tokens and step maps of one set of dice records against the peer's; prints a line per prompt.
  auto compare = [&](const std::vector<rollout::SampleRecord>& got_recs, const std::string& what) {
    int64_t equal_tokens = 0, total = 0;
    bool all_equal = true;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto want = peer["responses"][i].get<std::vector<int64_t>>();
      auto want_steps = peer["step_maps"][i].get<std::vector<int64_t>>();
      const auto& got = got_recs[i].response_ids;
      const size_t common = std::min(want.size(), got.size());
      size_t first_diff = common;
      for (size_t j = 0; j < common; ++j) {
        if (want[j] == got[j]) ++equal_tokens;
        else if (first_diff == common) first_diff = j;
      }
      total += static_cast<int64_t>(want.size());
      const bool eq = want == got && want_steps == got_recs[i].step_map;
      all_equal = all_equal && eq;
      std::printf("greedy%s prompt %zu (len %zu): %s  tokens %zu/%zu, first difference at %zu, step maps %s\n",
                  what.c_str(), i, prompts[i].size(), eq ? "EQUAL" : "DIFFERENT", got.size(), want.size(), first_diff,
                  want_steps == got_recs[i].step_map ? "equal" : "different");
    }
    std::printf("greedy-equality%s %s: %ld of %ld tokens equal (dice batch of %zu vs peer [%s] one by one, %s fp32)\n",
                what.c_str(), all_equal ? "PASS" : "FAIL", static_cast<long>(equal_tokens), static_cast<long>(total),
                prompts.size(), peer["impl"].get<std::string>().c_str(), shape.c_str());
    return all_equal;
  };
  bool all_equal = compare(recs, "");
  if (!graph_recs.empty()) all_equal = compare(graph_recs, " with CUDA graphs") && all_equal;
  if (!fused_recs.empty()) all_equal = compare(fused_recs, " with fused kernels") && all_equal;
  if (a.fused != "off") all_equal = check_fused_bf16(shape, dev) && all_equal;
  DICE_REQUIRE(all_equal, "dice's greedy tokens differ from the peer's (see above).");
}

// ---- --op-profile: operators per decode step, from the dispatcher ----------------------------
// Counts the innermost compute operators (views, allocations and dtype-dispatch wrappers left out),
// so on a GPU each counted operator is about one kernel. Two runs that differ only in length are
// differenced, which leaves the per-step cost. The shape keeps its layers and heads; widths are cut
// down, which changes no operator count.
struct OpFrame {
  const char* name;
  bool has_compute_child;
};
thread_local std::vector<OpFrame> op_stack;
thread_local std::map<std::string, int64_t>* op_counts = nullptr;

bool metadata_op(const char* name) {
  static const std::set<std::string> meta = {
      "aten::as_strided", "aten::resolve_conj", "aten::resolve_neg", "aten::_reshape_alias", "aten::_unsafe_view",
      "aten::empty_strided", "aten::empty", "aten::empty_like", "aten::result_type", "aten::view", "aten::view_as",
      "aten::resize_", "aten::expand", "aten::expand_as", "aten::narrow", "aten::slice", "aten::select",
      "aten::transpose", "aten::unsqueeze", "aten::squeeze", "aten::reshape", "aten::t", "aten::permute",
      "aten::detach", "aten::alias", "aten::unbind", "aten::split", "aten::chunk", "aten::contiguous", "aten::to",
      "aten::_to_copy", "aten::lift_fresh", "aten::set_", "aten::_has_compatible_shallow_copy_type"};
  return meta.count(name) > 0;
}

void run_op_profile(const SampleBenchArgs& a) {
  const auto dev = bench_device();
  const auto dtype = dev.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            if (!op_stack.empty() && !metadata_op(fn.name())) op_stack.back().has_compute_child = true;
            op_stack.push_back({fn.name(), false});
            return nullptr;
          },
          [](const at::RecordFunction&, at::ObserverContext*) {
            if (op_stack.empty()) return;
            const OpFrame f = op_stack.back();
            op_stack.pop_back();
            if (op_counts && !f.has_compute_child && !metadata_op(f.name)) ++(*op_counts)[f.name];
          })
          .scopes({at::RecordScope::FUNCTION}));
  for (const auto& shape : a.shapes) {
    auto cfg = model::ModelConfig::preset(shape);
    cfg.hidden_size = 64;
    cfg.intermediate_size = 128;
    cfg.head_dim = 16;
    cfg.vocab_size = 1024;
    cfg.mask_token_id = 1023;
    cfg.bos_token_id = cfg.eos_token_id = 0;
    model::Transformer m(cfg, dtype, dev);
    {
      torch::NoGradGuard ng;
      torch::manual_seed(1);
      for (auto& p : m->parameters()) p.normal_(0.0, 0.02);  // counts do not depend on the values
    }
    for (bool fused : {false, true}) {
      if ((fused && a.fused == "off") || (!fused && a.fused == "on")) continue;
      std::map<std::string, int64_t> counts[2];
      int64_t forwards[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        rollout::SamplerConfig c;
        c.strategy = "static";
        c.temperature = a.temperature;
        c.stop_ids = {};
        c.max_batch = 1;
        c.max_new_tokens = k == 0 ? 16 : 48;
        c.max_len = 64 + c.max_new_tokens;
        c.cuda_graphs = false;
        c.fixed_shapes = true;  // the steps a graph would replay, run eagerly so each operator is seen
        c.fused = fused;
        rollout::Sampler s(m, c);
        op_counts = &counts[k];
        s.generate({std::vector<int64_t>(40, 5)});
        op_counts = nullptr;
        forwards[k] = s.last_stats().forwards;
      }
      const double steps = static_cast<double>(forwards[1] - forwards[0]);
      DICE_REQUIRE(steps > 0, "op profile: the two runs took the same number of steps");
      std::vector<std::pair<double, std::string>> rows;
      double total = 0;
      for (const auto& [name, n] : counts[1]) {
        const double per = (n - counts[0][name]) / steps;
        if (per > 0.05) rows.emplace_back(per, name);
        total += per;
      }
      std::sort(rows.rbegin(), rows.rend());
      std::printf("%s (%ld layers, %s, %s%s): %.0f operators per decode step, %.1f per layer\n", shape.c_str(),
                  static_cast<long>(cfg.num_hidden_layers), dev.str().c_str(), dtype == torch::kBFloat16 ? "bf16" : "fp32",
                  fused ? ", fused: our own CUDA kernels, 5 per layer, are not counted" : "", total, total / static_cast<double>(cfg.num_hidden_layers));
      for (const auto& [per, name] : rows) std::printf("  %8.1f  %s\n", per, name.c_str());
      std::fflush(stdout);
    }
  }
  at::removeCallback(handle);
}

void setup_sample(CLI::App& cmd) {
  auto a = std::make_shared<SampleBenchArgs>();
  auto shapes = std::make_shared<std::string>("sdar-1.7b,sdar-4b");
  auto batches = std::make_shared<std::string>("1,32,128");
  auto strategies = std::make_shared<std::string>("static,dynamic");
  cmd.add_option("--shapes", *shapes, "model shapes (presets), comma-separated");
  cmd.add_option("--batches", *batches, "batch sizes, comma-separated");
  cmd.add_option("--strategies", *strategies, "unmasking strategies, comma-separated");
  cmd.add_option("--prompt-len", a->prompt_len, "prompt tokens");
  cmd.add_option("--max-new-tokens", a->max_new, "new tokens per sequence");
  cmd.add_option("--max-new-large", a->max_new_large, "new tokens for batches >= 32 (0 = --max-new-tokens)");
  cmd.add_option("--peer-max-new", a->peer_max_new, "new tokens for the peer (0 = same as dice)");
  cmd.add_option("--temperature", a->temperature, "sampling temperature");
  cmd.add_option("--check-every", a->check_every, "sampler.check_every");
  cmd.add_option("--phase-new", a->phase_new,
                 "new tokens of an extra run timed phase by phase (device synchronised; 0 = skip)");
  cmd.add_flag("!--no-peer", a->peer, "skip the PyTorch peer");
  cmd.add_option("--peer-script", a->peer_script, "the peer script");
  cmd.add_option("--python", a->python, "python with torch (+ transformers) for the peer");
  cmd.add_option("--json", a->json_out, "write results as JSON");
  cmd.add_option("--graphs", a->graphs, "sampler.cuda_graphs rows: off, on or both")
      ->check(CLI::IsMember({"off", "on", "both"}));
  cmd.add_flag("--greedy-check", a->greedy_check, "compare greedy tokens with the peer (first shape)");
  cmd.add_option("--work-dir", a->work_dir, "where --greedy-check writes its model");
  cmd.add_option("--fused", a->fused, "sampler.fused rows: off, on or both (also in --greedy-check, --op-profile)")
      ->check(CLI::IsMember({"off", "on", "both"}));
  cmd.add_flag("--no-cudnn-sdpa", a->no_cudnn_sdpa, "attention without SDPA's cuDNN backend (flash / efficient)");
  cmd.add_flag("--no-decode-kernel", a->no_decode_kernel, "fused: block-decode attention by SDPA, not our kernel");
  cmd.add_flag("--op-profile", a->op_profile, "count the operators (about: kernels) of one decode step per shape");
  cmd.callback([a, shapes, batches, strategies] {
    a->shapes = split_list(*shapes);
    a->strategies = split_list(*strategies);
    a->batches.clear();
    for (const auto& b : split_list(*batches)) a->batches.push_back(std::stoll(b));
    if (a->no_cudnn_sdpa) {
#if DICE_TORCH_AT_LEAST(2, 6)
      at::globalContext().setSDPUseCuDNN(false);
#else
      log::warn("bench sample: --no-cudnn-sdpa needs LibTorch >= 2.6; ignored");
#endif
    }
    if (a->no_decode_kernel) model::fused::enable_decode_attention_kernel(false);
    if (a->greedy_check) run_greedy_check(*a);
    else if (a->op_profile) run_op_profile(*a);
    else run_throughput(*a);
  });
}

}  // namespace

BenchSuite sample_suite() {
  return {"sample",
          "block-diffusion sampler tokens/s vs a PyTorch SDAR loop and the roofline",
          setup_sample};
}

}  // namespace dice::bench
