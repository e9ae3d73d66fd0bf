// The batched block-diffusion sampler (see sampler.h).
//
// Shape legend: S cache rows, n active rows (a prefix of the cache rows), W block width,
// V vocabulary, T max_len (cache slots per row).
//
// Every decode forward runs all n active rows on their current block. For a row whose block still
// has masks it is a denoising step (draw, unmask); for a row whose block has no masks it is the
// commit forward (its final K/V land in the cache) after which the row moves to the next block.
// The device holds the whole decode state; the host only mirrors block positions (exactly for
// static / sequential, as a bound between checks for dynamic) and reads the active flags every
// `check_every` forwards to retire finished rows, compact the batch and admit waiting prompts.
#include "dice/rollout/sampler.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

// CUDA graphs come with every CUDA LibTorch; a CPU LibTorch decodes eagerly.
#if defined(DICE_WITH_CUDA) && DICE_WITH_CUDA && defined(__has_include)
#if __has_include(<ATen/cuda/CUDAGraph.h>)
#define DICE_WITH_CUDA_GRAPHS 1
#endif
#endif
#ifndef DICE_WITH_CUDA_GRAPHS
#define DICE_WITH_CUDA_GRAPHS 0
#endif

#if DICE_WITH_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "dice/model/masks.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::rollout {

void SamplerConfig::validate() const {
  DICE_REQUIRE(block_size >= 0, "sampler.block_size must be >= 0 (0 = the model's); got ", block_size, ".");
  DICE_REQUIRE(steps > 0, "sampler.steps must be > 0; got ", steps, ".");
  parse_strategy(strategy);
  DICE_REQUIRE(threshold >= 0 && threshold <= 1, "sampler.threshold must be in [0, 1]; got ", threshold, ".");
  DICE_REQUIRE(temperature >= 0, "sampler.temperature must be >= 0; got ", temperature, ".");
  DICE_REQUIRE(top_k >= 0, "sampler.top_k must be >= 0; got ", top_k, ".");
  DICE_REQUIRE(top_p > 0 && top_p <= 1, "sampler.top_p must be in (0, 1]; got ", top_p, ".");
  DICE_REQUIRE(max_new_tokens > 0, "sampler.max_new_tokens must be > 0; got ", max_new_tokens, ".");
  DICE_REQUIRE(max_batch > 0, "sampler.max_batch must be > 0; got ", max_batch, ".");
  DICE_REQUIRE(max_len > 0, "sampler.max_len must be > 0; got ", max_len, ".");
  DICE_REQUIRE(check_every > 0, "sampler.check_every must be > 0; got ", check_every, ".");
  DICE_REQUIRE(prefill_tokens > 0, "sampler.prefill_tokens must be > 0; got ", prefill_tokens, ".");
  DICE_REQUIRE(graph_span_step > 0, "sampler.graph_span_step must be > 0; got ", graph_span_step, ".");
  DICE_REQUIRE(max_graphs >= 0, "sampler.max_graphs must be >= 0; got ", max_graphs, ".");
}

int64_t graph_rows(int64_t n, int64_t max_rows) {
  int64_t b = n <= 16 ? 1 : (n + 15) / 16 * 16;
  if (n <= 16)
    while (b < n) b *= 2;
  return std::min(b, max_rows);
}

int64_t graph_span(int64_t span, int64_t step, int64_t max_len) {
  return std::min((span + step - 1) / step * step, max_len);
}

namespace {

// A KVCache object whose K/V are views of rows [first, first + count) of `full` (no copy): the
// forward writes and reads the full cache's memory. Its own tensors live on the meta device, so
// building one allocates nothing.
std::unique_ptr<model::KVCache> cache_rows(model::KVCache& full, const model::ModelConfig& mc, int64_t first,
                                           int64_t count, torch::Dtype dtype) {
  auto v = std::make_unique<model::KVCache>(mc, count, full.max_len(), dtype, torch::Device(torch::kMeta));
  for (int64_t l = 0; l < full.num_layers(); ++l) {
    v->k(l) = full.k(l).narrow(0, first, count);
    v->v(l) = full.v(l).narrow(0, first, count);
  }
  return v;
}

// Host mirror of one active row.
struct Slot {
  int64_t req = 0;         // index into the call's prompts
  int64_t pos = 0;         // current block start (exact for static / sequential)
  int64_t phase = 0;       // denoising steps taken in the current block
  int64_t needed = 0;      // denoising steps the current block takes (static / sequential)
  double joined_s = 0;
  int64_t since_check = 0;  // forwards since `pos` was read back (dynamic)
};

}  // namespace

struct Sampler::Impl {
  model::ModelConfig mc;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;
  Strategy strategy = Strategy::kStatic;
  SamplingParams sp;
  std::unique_ptr<model::KVCache> cache;  // S rows x T slots

  // Device state of the n active rows (row i = cache row i).
  BlockState st;
  torch::Tensor pos;         // int64 [n] block start
  torch::Tensor seq_id;      // int64 [n]
  torch::Tensor prompt_len;  // int64 [n]
  torch::Tensor active;      // bool [n]
  torch::Tensor seq_tokens;  // int64 [n, T] prompt + committed blocks
  torch::Tensor seq_steps;   // int64 [n, T] unmask step per position (-1 for the prompt)
  torch::Tensor seq_logp;    // float [n, T]
  torch::Tensor stop_ids;    // int64 [n_stop]
  torch::Tensor iota_W;      // int64 [W]
  std::vector<Slot> slots;   // host mirror, size n

  // cuda_graphs: the whole decode state in fixed buffers of all S cache rows, updated in place by
  // every fixed-shape step (rows past the active ones are inert padding). While the state lives
  // there, st / pos / ... above are views of their first n rows.
  struct Resident {
    BlockState st;
    torch::Tensor pos, seq_id, prompt_len, active, seq_tokens, seq_steps, seq_logp;
  };
  Resident g;
#if DICE_WITH_CUDA_GRAPHS
  struct Graph {
    at::cuda::CUDAGraph graph;
  };
  std::map<std::tuple<int64_t, int64_t, bool>, std::unique_ptr<Graph>> graphs;  // (rows, span, commit)
  decltype(at::cuda::graph_pool_handle()) pool{0, 0};
  bool graphs_failed = false;
#endif
  void drop_graphs() {
    g = Resident{};
#if DICE_WITH_CUDA_GRAPHS
    graphs.clear();
    pool = {0, 0};  // a fresh pool for the next captures
#endif
  }

  int64_t n() const { return static_cast<int64_t>(slots.size()); }
};

Sampler::Sampler(model::Transformer model, SamplerConfig cfg)
    : model_(std::move(model)), cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  cfg_.validate();
  auto& I = *impl_;
  I.mc = model_->config();
  I.device = model_->device();
  I.dtype = model_->dtype();
  block_ = cfg_.block_size > 0 ? cfg_.block_size : I.mc.block_size;
  DICE_REQUIRE(block_ > 0, "The sampler needs a block size: set sampler.block_size or the model's block_size.");
  DICE_REQUIRE(I.mc.mask_token_id >= 0 && I.mc.mask_token_id < I.mc.vocab_size, "The model's mask_token_id ",
               I.mc.mask_token_id, " is outside its vocabulary of ", I.mc.vocab_size, " tokens.");
  I.strategy = parse_strategy(cfg_.strategy);
  I.sp = SamplingParams{cfg_.temperature, cfg_.top_k, cfg_.top_p, cfg_.fused};
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(I.device);
  I.stop_ids = torch::tensor(cfg_.stop_ids.empty() ? std::vector<int64_t>{-1} : cfg_.stop_ids, torch::kInt64).to(I.device);
  I.iota_W = torch::arange(block_, i64);
}

Sampler::~Sampler() = default;

int64_t Sampler::cache_bytes() const {
  const auto& mc = impl_->mc;
  return 2 * mc.num_hidden_layers * cfg_.max_batch * mc.num_key_value_heads * cfg_.max_len * mc.head_dim *
         static_cast<int64_t>(c10::elementSize(impl_->dtype));
}

void Sampler::release() {
  auto& I = *impl_;
  I.drop_graphs();
  I.cache.reset();
  I.st = BlockState{};
  I.pos = I.seq_id = I.prompt_len = I.active = I.seq_tokens = I.seq_steps = I.seq_logp = torch::Tensor();
  I.slots.clear();
}

std::vector<SampleRecord> Sampler::generate(const std::vector<std::vector<int64_t>>& prompts, uint64_t first_seq_id,
                                            const std::function<void(int64_t, int64_t)>& progress) {
  c10::InferenceMode inference;
  auto& I = *impl_;
  const int64_t W = block_, T = cfg_.max_len, N = static_cast<int64_t>(prompts.size());
  const int64_t mask_id = I.mc.mask_token_id;
  Timer wall;
  stats_ = SampleStats{};
  stats_.sequences = N;
  std::vector<SampleRecord> out(static_cast<size_t>(N));
  if (N == 0) return out;

  // ---- validate the request ----
  for (int64_t i = 0; i < N; ++i) {
    const auto& p = prompts[static_cast<size_t>(i)];
    DICE_REQUIRE(!p.empty(), "Prompt ", i, " is empty; every prompt needs at least one token.");
    for (auto t : p)
      DICE_REQUIRE(t >= 0 && t < I.mc.vocab_size, "Prompt ", i, " holds token id ", t,
                   ", outside the model's vocabulary of ", I.mc.vocab_size, " tokens.");
    const int64_t L = static_cast<int64_t>(p.size());
    const int64_t need = (L + cfg_.max_new_tokens + W - 1) / W * W;
    DICE_REQUIRE(need <= T, "Prompt ", i, " has ", L, " tokens; with max_new_tokens ", cfg_.max_new_tokens,
                 " it needs ", need, " cache slots, but sampler.max_len is ", T,
                 ". Raise sampler.max_len or shorten the prompt.");
    stats_.prompt_tokens += L;
  }

  // ---- the KV cache: allocated once, grown only when a call needs more rows ----
  const int64_t S = std::min(cfg_.max_batch, std::max<int64_t>(N, I.cache ? I.cache->batch() : 0));
  if (!I.cache || I.cache->batch() < S || I.cache->max_len() != T) {
    I.drop_graphs();  // they read and write the old cache's memory
    I.cache.reset();
    const double gib = 2.0 * I.mc.num_hidden_layers * S * I.mc.num_key_value_heads * T * I.mc.head_dim *
                       c10::elementSize(I.dtype) / (1024.0 * 1024 * 1024);
    try {
      I.cache = std::make_unique<model::KVCache>(I.mc, S, T, I.dtype, I.device);
    } catch (const c10::Error& e) {
      throw Error(str("The sampler's KV cache (", S, " rows x ", T, " tokens, ", gib, " GiB) does not fit on ",
                      I.device, ": lower sampler.max_batch or sampler.max_len. (", e.what_without_backtrace(), ")"));
    }
  }
  const int64_t rows = I.cache->batch();
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(I.device);
  const bool exact_mirror = I.strategy != Strategy::kDynamic;
  const bool fixed_shapes = cfg_.fixed_shapes || (cfg_.cuda_graphs && I.device.is_cuda());
  const int64_t first_block_steps = std::min(cfg_.steps, W);  // static: steps of a fully masked block

  // Phase timing (time_phases): wait for the device, then read the clock.
  // With cuda_graphs a replayed step is one phase (model_s); its first, eager run is split.
  const bool timed = cfg_.time_phases;
  bool in_capture = false;  // nothing may wait for the device while a graph is being recorded
  auto mark = [&]() {
    if (timed && I.device.is_cuda() && !in_capture) torch::cuda::synchronize();
    return wall.elapsed_s();
  };

  // ---- admission: prefill waiting prompts into free rows [n, n + m) ----
  int64_t next = 0, done = 0;
  auto admit = [&]() {
    const int64_t n0 = I.n();
    const int64_t m = std::min(rows - n0, N - next);
    if (m <= 0) return;
    Timer t;
    std::vector<int64_t> full(static_cast<size_t>(m)), lens(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j) {
      lens[j] = static_cast<int64_t>(prompts[static_cast<size_t>(next + j)].size());
      full[j] = lens[j] / W * W;
    }
    // Prefill the full prompt blocks, in chunks of at most prefill_tokens tokens.
    for (int64_t a = 0; a < m;) {
      int64_t b = a, Lp = 0;
      while (b < m && (b == a || std::max(Lp, full[b]) * (b - a + 1) <= cfg_.prefill_tokens)) Lp = std::max(Lp, full[b++]);
      if (Lp > 0) {
        auto ids = torch::zeros({b - a, Lp}, torch::kInt64);
        for (int64_t j = a; j < b; ++j) {
          const auto& p = prompts[static_cast<size_t>(next + j)];
          if (full[j] > 0) ids[j - a].narrow(0, 0, full[j]).copy_(torch::tensor(std::vector<int64_t>(p.begin(), p.begin() + full[j])));
        }
        auto full_t = torch::tensor(std::vector<int64_t>(full.begin() + a, full.begin() + b), torch::kInt64).to(I.device);
        auto view = cache_rows(*I.cache, I.mc, n0 + a, b - a, I.dtype);
        model::ForwardArgs fa;
        fa.ids = ids.to(I.device);
        fa.positions = torch::arange(Lp, i64).unsqueeze(0).expand({b - a, Lp}).contiguous();
        fa.mask = model::prefill_mask(full_t, Lp, W);
        fa.cache = view.get();
        fa.kv_span = Lp;
        fa.fused = cfg_.fused;
        model_->hidden(fa);
        ++stats_.prefills;
      }
      a = b;
    }
    // Initial decode state of the new rows (built on the host, one copy to the device).
    auto tok = torch::full({m, W}, mask_id, torch::kInt64);
    auto msk = torch::ones({m, W}, torch::kBool);
    auto seqt = torch::zeros({m, T}, torch::kInt64);
    std::vector<int64_t> n_init(static_cast<size_t>(m)), sid(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j) {
      const auto& p = prompts[static_cast<size_t>(next + j)];
      const int64_t r = lens[j] - full[j];
      seqt[j].narrow(0, 0, lens[j]).copy_(torch::tensor(p, torch::kInt64));
      if (r > 0) {
        tok[j].narrow(0, 0, r).copy_(torch::tensor(std::vector<int64_t>(p.end() - r, p.end()), torch::kInt64));
        msk[j].narrow(0, 0, r).fill_(false);
      }
      n_init[j] = W - r;
      sid[j] = static_cast<int64_t>(first_seq_id + static_cast<uint64_t>(next + j));
      Slot s;
      s.req = next + j;
      s.pos = full[j];
      s.needed = std::min(cfg_.steps, W - r);
      s.joined_s = wall.elapsed_s();
      out[static_cast<size_t>(next + j)].queued_s = s.joined_s;
      I.slots.push_back(s);
    }
    auto dev = [&](const torch::Tensor& x) { return x.to(I.device); };
    BlockState ns = BlockState::empty(m, W, mask_id, I.device);
    ns.tokens = dev(tok);
    ns.masked = dev(msk);
    ns.n_masked_init = dev(torch::tensor(n_init, torch::kInt64));
    auto cat = [&](torch::Tensor& a, const torch::Tensor& b) { a = a.defined() && a.size(0) > 0 ? torch::cat({a, b}) : b; };
    cat(I.st.tokens, ns.tokens);
    cat(I.st.masked, ns.masked);
    cat(I.st.n_masked_init, ns.n_masked_init);
    cat(I.st.step_in_block, ns.step_in_block);
    cat(I.st.global_step, ns.global_step);
    cat(I.st.unmask_step, ns.unmask_step);
    cat(I.st.logprob, ns.logprob);
    cat(I.pos, dev(torch::tensor(full, torch::kInt64)));
    cat(I.seq_id, dev(torch::tensor(sid, torch::kInt64)));
    cat(I.prompt_len, dev(torch::tensor(lens, torch::kInt64)));
    cat(I.active, torch::ones({m}, i64.dtype(torch::kBool)));
    cat(I.seq_tokens, dev(seqt));
    cat(I.seq_steps, torch::full({m, T}, -1, i64));
    cat(I.seq_logp, torch::zeros({m, T}, i64.dtype(torch::kFloat32)));
    next += m;
    if (timed) mark();
    stats_.prefill_s += t.elapsed_s();
  };

  // ---- after a forward: draw, unmask, commit finished blocks, start the next ones ----
  // Works on whichever tensors it is given (the live state, or the resident buffers' first rows);
  // reads nothing back to the host, so it can be captured in a CUDA graph with the forward.
  auto update = [&](BlockState& st, torch::Tensor& pos, torch::Tensor& active, torch::Tensor& seq_tokens,
                    torch::Tensor& seq_steps, torch::Tensor& seq_logp, const torch::Tensor& seq_id,
                    const torch::Tensor& prompt_len, const torch::Tensor& logits, double& t_draw) {
    auto committing = active & st.masked.any(1).logical_not();
    if (logits.defined()) {
      auto u = uniform_noise(cfg_.seed, seq_id, st.global_step, W);
      auto d = draw_tokens(logits, u, I.sp, cfg_.record_logprobs);
      apply_step(st, d, active, cfg_.steps, I.strategy, cfg_.threshold);
      if (timed) t_draw = mark();
    }
    // Commit: record the final block, decide whether the row is finished, else start the next block.
    auto cols = pos.unsqueeze(1) + I.iota_W;  // [n, W]
    auto c1 = committing.unsqueeze(1);
    seq_tokens.scatter_(1, cols, torch::where(c1, st.tokens, seq_tokens.gather(1, cols)));
    seq_steps.scatter_(1, cols, torch::where(c1, st.unmask_step, seq_steps.gather(1, cols)));
    if (cfg_.record_logprobs) seq_logp.scatter_(1, cols, torch::where(c1, st.logprob, seq_logp.gather(1, cols)));
    auto limit = prompt_len + cfg_.max_new_tokens;  // [n]
    auto generated = (cols >= prompt_len.unsqueeze(1)) & (cols < limit.unsqueeze(1));
    auto stop = (torch::isin(st.tokens, I.stop_ids) & generated).any(1);
    auto finished = committing & (stop | (pos + W >= limit));
    auto advance = committing & finished.logical_not();
    active = active & finished.logical_not();
    pos = pos + advance.to(torch::kInt64) * W;
    auto a1 = advance.unsqueeze(1);
    st.tokens = torch::where(a1, torch::full_like(st.tokens, mask_id), st.tokens);
    st.masked = st.masked | a1;
    st.n_masked_init = torch::where(advance, torch::full_like(st.n_masked_init, W), st.n_masked_init);
    st.step_in_block = torch::where(advance, torch::zeros_like(st.step_in_block), st.step_in_block);
    st.unmask_step = torch::where(a1, torch::full_like(st.unmask_step, -1), st.unmask_step);
    st.logprob = torch::where(a1, torch::zeros_like(st.logprob), st.logprob);
  };

  // ---- cuda_graphs: the state moves into the resident buffers once per admit / retire ----
  auto fields = [](BlockState& st, torch::Tensor& pos, torch::Tensor& seq_id, torch::Tensor& prompt_len,
                   torch::Tensor& active, torch::Tensor& seq_tokens, torch::Tensor& seq_steps, torch::Tensor& seq_logp) {
    return std::vector<torch::Tensor*>{&st.tokens,      &st.masked, &st.n_masked_init, &st.step_in_block,
                                       &st.global_step, &st.unmask_step, &st.logprob,   &pos,
                                       &seq_id,         &prompt_len,  &active,         &seq_tokens,
                                       &seq_steps,      &seq_logp};
  };
  auto resident_fields = [&]() {
    auto& R = I.g;
    return fields(R.st, R.pos, R.seq_id, R.prompt_len, R.active, R.seq_tokens, R.seq_steps, R.seq_logp);
  };
  auto live_fields = [&]() {
    return fields(I.st, I.pos, I.seq_id, I.prompt_len, I.active, I.seq_tokens, I.seq_steps, I.seq_logp);
  };
  auto make_resident = [&](int64_t n) {
    auto& R = I.g;
    if (!R.pos.defined()) {
      R.st = BlockState::empty(rows, W, mask_id, I.device);
      R.pos = torch::zeros({rows}, i64);
      R.seq_id = torch::zeros({rows}, i64);
      R.prompt_len = torch::zeros({rows}, i64);
      R.active = torch::zeros({rows}, i64.dtype(torch::kBool));
      R.seq_tokens = torch::zeros({rows, T}, i64);
      R.seq_steps = torch::full({rows, T}, -1, i64);
      R.seq_logp = torch::zeros({rows, T}, i64.dtype(torch::kFloat32));
    }
    auto live = live_fields();
    auto res = resident_fields();
    if (live[0]->data_ptr() == res[0]->data_ptr() && live[0]->size(0) == n) return;  // already there
    for (size_t f = 0; f < live.size(); ++f) {
      res[f]->narrow(0, 0, n).copy_(*live[f]);
      *live[f] = res[f]->narrow(0, 0, n);
    }
    // Inert padding: inactive, no masks, position 0 (their forwards write only free cache rows).
    if (n < rows) {
      R.st.tokens.narrow(0, n, rows - n).fill_(mask_id);
      R.st.masked.narrow(0, n, rows - n).fill_(false);
      R.active.narrow(0, n, rows - n).fill_(false);
      R.pos.narrow(0, n, rows - n).zero_();
      R.prompt_len.narrow(0, n, rows - n).zero_();
    }
  };
  // One fixed-shape step of the resident rows [0, nb): forward over `sb` key slots, then update,
  // written back in place. Captured as a CUDA graph per (nb, sb, commit) on a GPU.
  auto fixed_step = [&](int64_t nb, int64_t sb, bool commit, double& t_model, double& t_draw) {
    auto res = resident_fields();
    std::vector<torch::Tensor> v;
    for (auto* t : res) v.push_back(t->narrow(0, 0, nb));
    BlockState st{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    auto pos = v[7], active = v[10], seq_tokens = v[11], seq_steps = v[12], seq_logp = v[13];
    auto view = cache_rows(*I.cache, I.mc, 0, nb, I.dtype);
    model::ForwardArgs fa;
    fa.ids = st.tokens;
    fa.positions = pos.unsqueeze(1) + I.iota_W;
    fa.kv_lengths = pos + W;  // each row attends its prompt and this block
    fa.cache = view.get();
    fa.kv_span = sb;
    fa.fused = cfg_.fused;
    torch::Tensor logits;
    if (commit) model_->hidden(fa);
    else logits = model_->forward(fa);
    if (timed) t_model = t_draw = mark();
    update(st, pos, active, seq_tokens, seq_steps, seq_logp, v[8], v[9], logits, t_draw);
    // seq_tokens / seq_steps / seq_logp were updated in place (scatter_); the rest are new tensors.
    const std::vector<torch::Tensor> outs{st.tokens,      st.masked,      st.n_masked_init, st.step_in_block,
                                          st.global_step, st.unmask_step, st.logprob,       pos,
                                          v[8],           v[9],           active};
    for (size_t f = 0; f < outs.size(); ++f)
      if (outs[f].data_ptr() != v[f].data_ptr()) v[f].copy_(outs[f]);
  };
  auto graph_step = [&](int64_t n, int64_t sb, bool commit, double& t_model, double& t_draw) {
    const int64_t nb = graph_rows(n, rows);
    make_resident(n);
#if DICE_WITH_CUDA_GRAPHS
    if (cfg_.cuda_graphs && I.device.is_cuda() && !I.graphs_failed) {
      const auto key = std::make_tuple(nb, sb, commit);
      auto it = I.graphs.find(key);
      if (it != I.graphs.end()) {
        it->second->graph.replay();
        ++stats_.graph_replays;
        if (timed) t_model = t_draw = mark();
        return;
      }
      if (static_cast<int64_t>(I.graphs.size()) < cfg_.max_graphs) {
        // First time for this shape: run the step for real (which also warms up lazy handles),
        // then record it; capturing runs nothing, so the state is not stepped twice.
        auto stream = c10::cuda::getStreamFromPool(false, I.device.index());
        torch::cuda::synchronize();
        {
          c10::cuda::CUDAStreamGuard guard(stream);
          fixed_step(nb, sb, commit, t_model, t_draw);  // this step, for real
        }
        torch::cuda::synchronize();
        try {
          if (I.pool.first == 0 && I.pool.second == 0) I.pool = at::cuda::graph_pool_handle();
          auto g = std::make_unique<Impl::Graph>();
          {
            c10::cuda::CUDAStreamGuard guard(stream);
            double unused = 0;
            g->graph.capture_begin(I.pool);
            in_capture = true;
            fixed_step(nb, sb, commit, unused, unused);
            in_capture = false;
            g->graph.capture_end();
          }
          torch::cuda::synchronize();
          I.graphs.emplace(key, std::move(g));
          ++stats_.graphs_captured;
          return;
        } catch (const std::exception& e) {
          in_capture = false;
          log::warn("sampler: CUDA graph capture failed, decoding without graphs from now on: ", e.what());
          I.graphs_failed = true;
          // Leave no stream capturing (a capture that threw half-way), then let the device settle.
          cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
          if (cudaStreamIsCapturing(stream.stream(), &capturing) == cudaSuccess &&
              capturing != cudaStreamCaptureStatusNone) {
            cudaGraph_t dangling = nullptr;
            if (cudaStreamEndCapture(stream.stream(), &dangling) == cudaSuccess && dangling) cudaGraphDestroy(dangling);
          }
          (void)cudaGetLastError();
          I.graphs.clear();
          try {
            torch::cuda::synchronize();
          } catch (const std::exception&) {
          }
          return;  // the step itself ran before the capture started
        }
      }
    }
#else
    static bool warned = false;
    if (cfg_.cuda_graphs && I.device.is_cuda() && !warned) {
      warned = true;
      log::warn("sampler: cuda_graphs is set but this build has no CUDA graphs; fixed-shape steps run eagerly");
    }
#endif
    fixed_step(nb, sb, commit, t_model, t_draw);
  };

  // ---- one decode step of all active rows ----
  auto forward_step = [&]() {
    const double t0 = timed ? mark() : 0;
    double t1 = t0, t2 = t0;
    const int64_t n = I.n();
    int64_t max_pos = 0;
    bool same = true;
    if (exact_mirror) {
      for (const auto& s : I.slots) {
        max_pos = std::max(max_pos, s.pos);
        same = same && s.pos == I.slots[0].pos;
      }
    } else {
      // Dynamic: positions are known at the last check; a row commits at most every second
      // forward (a commit, then at least one denoising step), which bounds where it can be now.
      for (const auto& s : I.slots) max_pos = std::max(max_pos, s.pos + W * ((s.since_check + 1) / 2));
      same = n == 1 && I.slots[0].since_check == 0;
    }
    // A finished row's mirror may run ahead of its (frozen) device position: clamp the span.
    const int64_t span = std::min(max_pos + W, T);
    // Static / sequential rows move in lockstep when they joined together: a forward in which every
    // row commits needs no logits and no draw.
    bool all_commit = exact_mirror;
    for (const auto& s : I.slots) all_commit = all_commit && s.phase == s.needed;
    ++stats_.forwards;
    if (fixed_shapes) {  // the same step in a fixed shape (see sampler.h)
      graph_step(n, graph_span(span, cfg_.graph_span_step, T), all_commit, t1, t2);
    } else {
      auto view = cache_rows(*I.cache, I.mc, 0, n, I.dtype);
      model::ForwardArgs fa;
      fa.ids = I.st.tokens;
      fa.positions = I.pos.unsqueeze(1) + I.iota_W;
      if (!same) fa.kv_lengths = I.pos + W;  // all rows aligned: every row attends the whole span
      fa.cache = view.get();
      fa.kv_span = span;
      fa.fused = cfg_.fused;
      torch::Tensor logits;  // [n, W, V]
      if (all_commit) model_->hidden(fa);
      else logits = model_->forward(fa);
      if (timed) t1 = t2 = mark();
      update(I.st, I.pos, I.active, I.seq_tokens, I.seq_steps, I.seq_logp, I.seq_id, I.prompt_len, logits, t2);
    }

    if (timed) {
      stats_.model_s += t1 - t0;
      stats_.draw_s += t2 - t1;
      stats_.commit_s += mark() - t2;
    }
    for (auto& s : I.slots) ++s.since_check;
    if (exact_mirror) {
      for (auto& s : I.slots) {
        if (s.phase < s.needed) {
          ++s.phase;
        } else {
          s.pos += W;
          s.phase = 0;
          s.needed = first_block_steps;
        }
      }
    }
  };

  // ---- retire finished rows, compact the rest into rows [0, n') ----
  auto retire = [&]() {
    const int64_t n = I.n();
    auto act = I.active.to(torch::kCPU);
    auto aa = act.accessor<bool, 1>();
    if (!exact_mirror) {
      auto p = I.pos.to(torch::kCPU);
      auto pa = p.accessor<int64_t, 1>();
      for (int64_t i = 0; i < n; ++i) {
        I.slots[static_cast<size_t>(i)].pos = pa[i];
        I.slots[static_cast<size_t>(i)].since_check = 0;
      }
    }
    std::vector<int64_t> keep, gone;
    for (int64_t i = 0; i < n; ++i) (aa[i] ? keep : gone).push_back(i);
    if (gone.empty()) return;
    auto gone_t = torch::tensor(gone, torch::kInt64).to(I.device);
    auto toks = I.seq_tokens.index_select(0, gone_t).to(torch::kCPU);
    auto stps = I.seq_steps.index_select(0, gone_t).to(torch::kCPU);
    auto lps = I.seq_logp.index_select(0, gone_t).to(torch::kCPU);
    auto ends = (I.pos.index_select(0, gone_t) + W).to(torch::kCPU);
    auto gsteps = I.st.global_step.index_select(0, gone_t).to(torch::kCPU);
    for (size_t g = 0; g < gone.size(); ++g) {
      const Slot& s = I.slots[static_cast<size_t>(gone[g])];
      const auto& p = prompts[static_cast<size_t>(s.req)];
      const int64_t L = static_cast<int64_t>(p.size());
      const int64_t block_end = ends[g].item<int64_t>();  // end of the final decoded block
      const int64_t end = std::min(block_end, L + cfg_.max_new_tokens);
      auto tg = toks[g], sg = stps[g], lg = lps[g];
      auto ta = tg.accessor<int64_t, 1>();
      auto sa = sg.accessor<int64_t, 1>();
      auto la = lg.accessor<float, 1>();
      SampleRecord& r = out[static_cast<size_t>(s.req)];
      r.seq_id = static_cast<int64_t>(first_seq_id + static_cast<uint64_t>(s.req));
      r.prompt_ids = p;
      r.stop_reason = "max_tokens";
      int64_t j = L;
      while (j < end && r.stop_reason == "max_tokens") {
        r.response_ids.push_back(ta[j]);
        r.step_map.push_back(sa[j]);
        if (cfg_.record_logprobs) r.logprobs.push_back(la[j]);
        if (std::find(cfg_.stop_ids.begin(), cfg_.stop_ids.end(), ta[j]) != cfg_.stop_ids.end())
          r.stop_reason = "stop_token";
        ++j;
      }
      // The rest of the final block was decoded alongside the response (context of its draws).
      for (; j < block_end; ++j) {
        r.tail_ids.push_back(ta[j]);
        r.tail_steps.push_back(sa[j]);
        if (cfg_.record_logprobs) r.tail_logprobs.push_back(la[j]);
      }
      r.steps = gsteps[g].item<int64_t>();
      r.decode_s = wall.elapsed_s() - s.joined_s;
      stats_.response_tokens += static_cast<int64_t>(r.response_ids.size());
    }
    done += static_cast<int64_t>(gone.size());
    if (progress) progress(done, N);

    // Move the kept rows' cache rows down (row keep[i] -> row i; sources never precede targets).
    std::vector<int64_t> src, dst;
    for (size_t i = 0; i < keep.size(); ++i)
      if (keep[i] != static_cast<int64_t>(i)) {
        src.push_back(keep[i]);
        dst.push_back(static_cast<int64_t>(i));
      }
    if (!src.empty()) {
      auto src_t = torch::tensor(src, torch::kInt64).to(I.device);
      auto dst_t = torch::tensor(dst, torch::kInt64).to(I.device);
      for (int64_t l = 0; l < I.cache->num_layers(); ++l) {
        for (auto* kv : {&I.cache->k(l), &I.cache->v(l)}) kv->index_copy_(0, dst_t, kv->index_select(0, src_t));
      }
    }
    auto keep_t = torch::tensor(keep, torch::kInt64).to(I.device);
    for (auto* t : {&I.st.tokens, &I.st.masked, &I.st.n_masked_init, &I.st.step_in_block, &I.st.global_step,
                    &I.st.unmask_step, &I.st.logprob, &I.pos, &I.seq_id, &I.prompt_len, &I.active, &I.seq_tokens,
                    &I.seq_steps, &I.seq_logp})
      *t = t->index_select(0, keep_t);
    std::vector<Slot> kept;
    for (auto i : keep) kept.push_back(I.slots[static_cast<size_t>(i)]);
    I.slots = std::move(kept);
  };

  // ---- the loop: admit, decode a few forwards, retire ----
  I.slots.clear();
  I.st = BlockState{};
  I.pos = I.seq_id = I.prompt_len = I.active = I.seq_tokens = I.seq_steps = I.seq_logp = torch::Tensor();
  while (done < N) {
    admit();
    for (int64_t f = 0; f < cfg_.check_every; ++f) forward_step();
    const double r0 = timed ? mark() : 0;
    retire();
    if (timed) stats_.retire_s += mark() - r0;
  }
  stats_.wall_s = wall.elapsed_s();
  return out;
}

}  // namespace dice::rollout
