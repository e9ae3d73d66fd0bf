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

// The device decode state of a set of rows (row i = cache row i).
struct DecodeState {
  BlockState st;
  torch::Tensor pos;         // int64 [n] block start
  torch::Tensor seq_id;      // int64 [n]
  torch::Tensor prompt_len;  // int64 [n]
  torch::Tensor active;      // bool [n]
  torch::Tensor seq_tokens;  // int64 [n, T] prompt + committed blocks
  torch::Tensor seq_steps;   // int64 [n, T] unmask step per position (-1 for the prompt)
  torch::Tensor seq_logp;    // float [n, T]

  // Every tensor, each with the rows as its first dimension, in one fixed order.
  std::vector<torch::Tensor*> fields() {
    return {&st.tokens,      &st.masked,      &st.n_masked_init, &st.step_in_block, &st.global_step,
            &st.unmask_step, &st.logprob,     &pos,              &seq_id,           &prompt_len,
            &active,         &seq_tokens,     &seq_steps,        &seq_logp};
  }
  // Views of rows [0, count).
  DecodeState first_rows(int64_t count) {
    DecodeState v;
    auto src = fields(), dst = v.fields();
    for (size_t f = 0; f < src.size(); ++f) *dst[f] = src[f]->narrow(0, 0, count);
    return v;
  }
};

}  // namespace

struct Sampler::Impl {
  model::ModelConfig mc;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;
  Strategy strategy = Strategy::kStatic;
  SamplingParams sp;
  std::unique_ptr<model::KVCache> cache;  // S rows x T slots
  torch::Tensor stop_ids;                 // int64 [n_stop]
  torch::Tensor iota_W;                   // int64 [W]

  // The n active rows.
  DecodeState live;
  std::vector<Slot> slots;  // host mirror, size n

  // cuda_graphs: the whole decode state in fixed buffers of all S cache rows, updated in place by
  // every fixed-shape step (rows past the active ones are inert padding). While the state lives
  // there, `live` holds views of their first n rows.
  DecodeState resident;
#if DICE_WITH_CUDA_GRAPHS
  struct Graph {
    at::cuda::CUDAGraph graph;
  };
  std::map<std::tuple<int64_t, int64_t, bool>, std::unique_ptr<Graph>> graphs;  // (rows, span, commit)
  decltype(at::cuda::graph_pool_handle()) pool{0, 0};
  bool graphs_failed = false;
#endif
  void drop_graphs() {
    resident = DecodeState{};
#if DICE_WITH_CUDA_GRAPHS
    graphs.clear();
    pool = {0, 0};  // a fresh pool for the next captures
#endif
  }
  void clear_rows() {
    live = DecodeState{};
    slots.clear();
  }

  int64_t n() const { return static_cast<int64_t>(slots.size()); }

  struct Run;
};

// One generate() call: its request and output, and the phases of its decode loop (see the file
// comment), working on the sampler's persistent state (Impl).
struct Sampler::Impl::Run {
  Run(Sampler& s, const std::vector<std::vector<int64_t>>& prompts, uint64_t first_seq_id,
      const std::function<void(int64_t, int64_t)>& progress);

  void validate_request();
  void ensure_cache();
  void admit();
  void forward_step();
  void retire();

  // Admission.
  void prefill(int64_t n0, int64_t m, const std::vector<int64_t>& full);
  void append_rows(int64_t m, const std::vector<int64_t>& lens, const std::vector<int64_t>& full);
  // A decode step.
  int64_t span_bound(bool& same) const;
  bool all_commit() const;
  void eager_step(int64_t span, bool same, bool commit, double& t_model, double& t_draw);
  void update(DecodeState& s, const torch::Tensor& logits, double& t_draw);
  void make_resident(int64_t n);
  void graph_step(int64_t n, int64_t sb, bool commit, double& t_model, double& t_draw);
  void fixed_step(int64_t nb, int64_t sb, bool commit, double& t_model, double& t_draw);
  void advance_mirror();
  // Retirement.
  void finish(const std::vector<int64_t>& gone);
  void fill_record(SampleRecord& r, const Slot& s, const torch::Tensor& tokens_T, const torch::Tensor& steps_T,
                   const torch::Tensor& logp_T, int64_t block_end);
  void compact(const std::vector<int64_t>& keep);
  // Phase timing (time_phases): wait for the device, then read the clock.
  // With cuda_graphs a replayed step is one phase (model_s); its first, eager run is split.
  double mark();

  Impl& I;
  model::Transformer& model;
  const SamplerConfig& cfg;
  SampleStats& stats;
  const std::vector<std::vector<int64_t>>& prompts;
  const uint64_t first_seq_id;
  const std::function<void(int64_t, int64_t)>& progress;
  const Sampler::RecordFn& on_record;
  Timer wall;
  const int64_t W, T, N, mask_id;
  const torch::TensorOptions i64;
  const bool exact_mirror;            // the host knows every row's block (static / sequential)
  const bool fixed_shapes;            // every decode step in a fixed shape (see sampler.h)
  const int64_t first_block_steps;    // static: steps of a fully masked block
  const bool timed;
  int64_t rows = 0;                   // cache rows
  bool in_capture = false;            // nothing may wait for the device while a graph is being recorded
  int64_t next = 0, done = 0;         // prompts admitted, sequences finished
  std::vector<SampleRecord> out;
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

void Sampler::set_temperature(double temperature) {
  DICE_REQUIRE(temperature >= 0, "sampler.temperature must be >= 0; got ", temperature, ".");
  if (temperature == cfg_.temperature) return;
  cfg_.temperature = temperature;
  impl_->sp.temperature = temperature;
  impl_->drop_graphs();  // they drew at the old temperature
}

int64_t Sampler::cache_bytes() const {
  const auto& mc = impl_->mc;
  return 2 * mc.num_hidden_layers * cfg_.max_batch * mc.num_key_value_heads * cfg_.max_len * mc.head_dim *
         static_cast<int64_t>(c10::elementSize(impl_->dtype));
}

void Sampler::release() {
  auto& I = *impl_;
  I.drop_graphs();
  I.cache.reset();
  I.clear_rows();
}

std::vector<SampleRecord> Sampler::generate(const std::vector<std::vector<int64_t>>& prompts, uint64_t first_seq_id,
                                            const std::function<void(int64_t, int64_t)>& progress) {
  c10::InferenceMode inference;
  Impl::Run run(*this, prompts, first_seq_id, progress);  // starts the call's clock
  stats_ = SampleStats{};
  stats_.sequences = run.N;
  if (run.N == 0) return {};
  run.validate_request();
  run.ensure_cache();
  impl_->clear_rows();
  while (run.done < run.N) {
    run.admit();  // waiting prompts into free rows
    for (int64_t f = 0; f < cfg_.check_every; ++f) run.forward_step();
    run.retire();  // finished rows out, the rest compacted
  }
  stats_.wall_s = run.wall.elapsed_s();
  return std::move(run.out);
}

Sampler::Impl::Run::Run(Sampler& s, const std::vector<std::vector<int64_t>>& prompts, uint64_t first_seq_id,
                        const std::function<void(int64_t, int64_t)>& progress)
    : I(*s.impl_),
      model(s.model_),
      cfg(s.cfg_),
      stats(s.stats_),
      prompts(prompts),
      first_seq_id(first_seq_id),
      progress(progress),
      on_record(s.on_record_),
      W(s.block_),
      T(s.cfg_.max_len),
      N(static_cast<int64_t>(prompts.size())),
      mask_id(I.mc.mask_token_id),
      i64(torch::TensorOptions().dtype(torch::kInt64).device(I.device)),
      exact_mirror(I.strategy != Strategy::kDynamic),
      fixed_shapes(cfg.fixed_shapes || (cfg.cuda_graphs && I.device.is_cuda())),
      first_block_steps(std::min(cfg.steps, W)),
      timed(cfg.time_phases),
      out(static_cast<size_t>(N)) {}

double Sampler::Impl::Run::mark() {
  if (timed && I.device.is_cuda() && !in_capture) torch::cuda::synchronize();
  return wall.elapsed_s();
}

// ---- the request: valid tokens, and room in a cache row for every prompt ----
void Sampler::Impl::Run::validate_request() {
  for (int64_t i = 0; i < N; ++i) {
    const auto& p = prompts[static_cast<size_t>(i)];
    DICE_REQUIRE(!p.empty(), "Prompt ", i, " is empty; every prompt needs at least one token.");
    for (auto t : p)
      DICE_REQUIRE(t >= 0 && t < I.mc.vocab_size, "Prompt ", i, " holds token id ", t,
                   ", outside the model's vocabulary of ", I.mc.vocab_size, " tokens.");
    const int64_t L = static_cast<int64_t>(p.size());
    const int64_t need = (L + cfg.max_new_tokens + W - 1) / W * W;
    DICE_REQUIRE(need <= T, "Prompt ", i, " has ", L, " tokens; with max_new_tokens ", cfg.max_new_tokens,
                 " it needs ", need, " cache slots, but sampler.max_len is ", T,
                 ". Raise sampler.max_len or shorten the prompt.");
    stats.prompt_tokens += L;
  }
}

// ---- the KV cache: allocated once, grown only when a call needs more rows ----
void Sampler::Impl::Run::ensure_cache() {
  const int64_t S = std::min(cfg.max_batch, std::max<int64_t>(N, I.cache ? I.cache->batch() : 0));
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
  rows = I.cache->batch();
}

// ---- admission: prefill waiting prompts into free rows [n, n + m) ----
void Sampler::Impl::Run::admit() {
  const int64_t n0 = I.n();
  const int64_t m = std::min(rows - n0, N - next);
  if (m <= 0) return;
  Timer t;
  std::vector<int64_t> full(static_cast<size_t>(m)), lens(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    lens[j] = static_cast<int64_t>(prompts[static_cast<size_t>(next + j)].size());
    full[j] = lens[j] / W * W;
  }
  prefill(n0, m, full);
  append_rows(m, lens, full);
  next += m;
  if (timed) mark();
  stats.prefill_s += t.elapsed_s();
}

// The full prompt blocks of prompts [next, next + m) into cache rows [n0, n0 + m), in chunks of
// at most prefill_tokens tokens.
void Sampler::Impl::Run::prefill(int64_t n0, int64_t m, const std::vector<int64_t>& full) {
  for (int64_t a = 0; a < m;) {
    int64_t b = a, Lp = 0;
    while (b < m && (b == a || std::max(Lp, full[b]) * (b - a + 1) <= cfg.prefill_tokens)) Lp = std::max(Lp, full[b++]);
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
      fa.fused = cfg.fused;
      model->hidden(fa);
      ++stats.prefills;
    }
    a = b;
  }
}

// The initial decode state of the m new rows (built on the host, one copy to the device), appended
// to the live rows, and their host mirrors.
void Sampler::Impl::Run::append_rows(int64_t m, const std::vector<int64_t>& lens, const std::vector<int64_t>& full) {
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
    s.needed = std::min(cfg.steps, W - r);
    s.joined_s = wall.elapsed_s();
    out[static_cast<size_t>(next + j)].queued_s = s.joined_s;
    I.slots.push_back(s);
  }
  auto dev = [&](const torch::Tensor& x) { return x.to(I.device); };
  DecodeState add;
  add.st = BlockState::empty(m, W, mask_id, I.device);
  add.st.tokens = dev(tok);
  add.st.masked = dev(msk);
  add.st.n_masked_init = dev(torch::tensor(n_init, torch::kInt64));
  add.pos = dev(torch::tensor(full, torch::kInt64));
  add.seq_id = dev(torch::tensor(sid, torch::kInt64));
  add.prompt_len = dev(torch::tensor(lens, torch::kInt64));
  add.active = torch::ones({m}, i64.dtype(torch::kBool));
  add.seq_tokens = dev(seqt);
  add.seq_steps = torch::full({m, T}, -1, i64);
  add.seq_logp = torch::zeros({m, T}, i64.dtype(torch::kFloat32));
  auto live = I.live.fields(), added = add.fields();
  for (size_t f = 0; f < live.size(); ++f) {
    torch::Tensor& a = *live[f];
    a = a.defined() && a.size(0) > 0 ? torch::cat({a, *added[f]}) : *added[f];
  }
}

// ---- one decode step of all active rows ----
void Sampler::Impl::Run::forward_step() {
  const double t0 = timed ? mark() : 0;
  double t_model = t0, t_draw = t0;
  bool same = true;
  const int64_t span = span_bound(same);
  const bool commit = all_commit();
  ++stats.forwards;
  if (fixed_shapes) graph_step(I.n(), graph_span(span, cfg.graph_span_step, T), commit, t_model, t_draw);
  else eager_step(span, same, commit, t_model, t_draw);
  if (timed) {
    stats.model_s += t_model - t0;
    stats.draw_s += t_draw - t_model;
    stats.commit_s += mark() - t_draw;
  }
  advance_mirror();
}

// The key span this step needs (every row's prompt and current block), from the host mirror;
// `same` when every row is known to sit on the same block.
int64_t Sampler::Impl::Run::span_bound(bool& same) const {
  int64_t max_pos = 0;
  same = true;
  if (exact_mirror) {
    for (const auto& s : I.slots) {
      max_pos = std::max(max_pos, s.pos);
      same = same && s.pos == I.slots[0].pos;
    }
  } else {
    // Dynamic: positions are known at the last check; a row commits at most every second
    // forward (a commit, then at least one denoising step), which bounds where it can be now.
    for (const auto& s : I.slots) max_pos = std::max(max_pos, s.pos + W * ((s.since_check + 1) / 2));
    same = I.n() == 1 && I.slots[0].since_check == 0;
  }
  // A finished row's mirror may run ahead of its (frozen) device position: clamp the span.
  return std::min(max_pos + W, T);
}

// Static / sequential rows move in lockstep when they joined together: a forward in which every
// row commits needs no logits and no draw.
bool Sampler::Impl::Run::all_commit() const {
  bool commit = exact_mirror;
  for (const auto& s : I.slots) commit = commit && s.phase == s.needed;
  return commit;
}

// The step on the live rows as they are (no padding, the exact key span).
void Sampler::Impl::Run::eager_step(int64_t span, bool same, bool commit, double& t_model, double& t_draw) {
  auto view = cache_rows(*I.cache, I.mc, 0, I.n(), I.dtype);
  model::ForwardArgs fa;
  fa.ids = I.live.st.tokens;
  fa.positions = I.live.pos.unsqueeze(1) + I.iota_W;
  if (!same) fa.kv_lengths = I.live.pos + W;  // all rows aligned: every row attends the whole span
  fa.cache = view.get();
  fa.kv_span = span;
  fa.fused = cfg.fused;
  torch::Tensor logits;  // [n, W, V]
  if (commit) model->hidden(fa);
  else logits = model->forward(fa);
  if (timed) t_model = t_draw = mark();
  update(I.live, logits, t_draw);
}

// ---- after a forward: draw, unmask, commit finished blocks, start the next ones ----
// Works on whichever rows it is given (the live state, or the resident buffers' first rows);
// reads nothing back to the host, so it can be captured in a CUDA graph with the forward.
void Sampler::Impl::Run::update(DecodeState& s, const torch::Tensor& logits, double& t_draw) {
  BlockState& st = s.st;
  auto committing = s.active & st.masked.any(1).logical_not();
  if (logits.defined()) {
    auto u = uniform_noise(cfg.seed, s.seq_id, st.global_step, W);
    auto d = draw_tokens(logits, u, I.sp, cfg.record_logprobs);
    apply_step(st, d, s.active, cfg.steps, I.strategy, cfg.threshold);
    if (timed) t_draw = mark();
  }
  // Commit: record the final block, decide whether the row is finished, else start the next block.
  auto cols = s.pos.unsqueeze(1) + I.iota_W;  // [n, W]
  auto c1 = committing.unsqueeze(1);
  s.seq_tokens.scatter_(1, cols, torch::where(c1, st.tokens, s.seq_tokens.gather(1, cols)));
  s.seq_steps.scatter_(1, cols, torch::where(c1, st.unmask_step, s.seq_steps.gather(1, cols)));
  if (cfg.record_logprobs) s.seq_logp.scatter_(1, cols, torch::where(c1, st.logprob, s.seq_logp.gather(1, cols)));
  auto limit = s.prompt_len + cfg.max_new_tokens;  // [n]
  auto generated = (cols >= s.prompt_len.unsqueeze(1)) & (cols < limit.unsqueeze(1));
  auto stop = (torch::isin(st.tokens, I.stop_ids) & generated).any(1);
  auto finished = committing & (stop | (s.pos + W >= limit));
  auto advance = committing & finished.logical_not();
  s.active = s.active & finished.logical_not();
  s.pos = s.pos + advance.to(torch::kInt64) * W;
  auto a1 = advance.unsqueeze(1);
  st.tokens = torch::where(a1, torch::full_like(st.tokens, mask_id), st.tokens);
  st.masked = st.masked | a1;
  st.n_masked_init = torch::where(advance, torch::full_like(st.n_masked_init, W), st.n_masked_init);
  st.step_in_block = torch::where(advance, torch::zeros_like(st.step_in_block), st.step_in_block);
  st.unmask_step = torch::where(a1, torch::full_like(st.unmask_step, -1), st.unmask_step);
  st.logprob = torch::where(a1, torch::zeros_like(st.logprob), st.logprob);
}

// ---- cuda_graphs: the state moves into the resident buffers once per admit / retire ----
void Sampler::Impl::Run::make_resident(int64_t n) {
  auto& R = I.resident;
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
  auto live = I.live.fields();
  auto res = R.fields();
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
}

// The step in a fixed shape: rows [0, n) padded to a bucket, over `sb` key slots; on a GPU with
// cuda_graphs each shape is captured once and replayed.
void Sampler::Impl::Run::graph_step(int64_t n, int64_t sb, bool commit, double& t_model, double& t_draw) {
  const int64_t nb = graph_rows(n, rows);
  make_resident(n);
#if DICE_WITH_CUDA_GRAPHS
  if (cfg.cuda_graphs && I.device.is_cuda() && !I.graphs_failed) {
    const auto key = std::make_tuple(nb, sb, commit);
    auto it = I.graphs.find(key);
    if (it != I.graphs.end()) {
      it->second->graph.replay();
      ++stats.graph_replays;
      if (timed) t_model = t_draw = mark();
      return;
    }
    if (static_cast<int64_t>(I.graphs.size()) < cfg.max_graphs) {
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
        auto g = std::make_unique<Graph>();
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
        ++stats.graphs_captured;
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
  if (cfg.cuda_graphs && I.device.is_cuda() && !warned) {
    warned = true;
    log::warn("sampler: cuda_graphs is set but this build has no CUDA graphs; fixed-shape steps run eagerly");
  }
#endif
  fixed_step(nb, sb, commit, t_model, t_draw);
}

// One fixed-shape step of the resident rows [0, nb): forward over `sb` key slots, then update,
// written back in place.
void Sampler::Impl::Run::fixed_step(int64_t nb, int64_t sb, bool commit, double& t_model, double& t_draw) {
  DecodeState buf = I.resident.first_rows(nb);
  DecodeState s = buf;  // update() replaces most tensors; the new ones are copied back into buf
  auto view = cache_rows(*I.cache, I.mc, 0, nb, I.dtype);
  model::ForwardArgs fa;
  fa.ids = s.st.tokens;
  fa.positions = s.pos.unsqueeze(1) + I.iota_W;
  fa.kv_lengths = s.pos + W;  // each row attends its prompt and this block
  fa.cache = view.get();
  fa.kv_span = sb;
  fa.fused = cfg.fused;
  torch::Tensor logits;
  if (commit) model->hidden(fa);
  else logits = model->forward(fa);
  if (timed) t_model = t_draw = mark();
  update(s, logits, t_draw);
  // seq_tokens / seq_steps / seq_logp were updated in place (scatter_); seq_id / prompt_len are unchanged.
  auto outs = s.fields(), bufs = buf.fields();
  for (size_t f = 0; f < outs.size(); ++f)
    if (outs[f]->data_ptr() != bufs[f]->data_ptr()) bufs[f]->copy_(*outs[f]);
}

// The host mirror follows the step (static / sequential: exactly).
void Sampler::Impl::Run::advance_mirror() {
  for (auto& s : I.slots) ++s.since_check;
  if (!exact_mirror) return;
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

// ---- retire finished rows, compact the rest into rows [0, n') ----
void Sampler::Impl::Run::retire() {
  const double r0 = timed ? mark() : 0;
  const int64_t n = I.n();
  auto act = I.live.active.to(torch::kCPU);
  auto aa = act.accessor<bool, 1>();
  if (!exact_mirror) {
    auto p = I.live.pos.to(torch::kCPU);
    auto pa = p.accessor<int64_t, 1>();
    for (int64_t i = 0; i < n; ++i) {
      I.slots[static_cast<size_t>(i)].pos = pa[i];
      I.slots[static_cast<size_t>(i)].since_check = 0;
    }
  }
  std::vector<int64_t> keep, gone;
  for (int64_t i = 0; i < n; ++i) (aa[i] ? keep : gone).push_back(i);
  if (!gone.empty()) {
    finish(gone);
    compact(keep);
  }
  if (timed) stats.retire_s += mark() - r0;
}

// The records of the finished rows `gone`.
void Sampler::Impl::Run::finish(const std::vector<int64_t>& gone) {
  auto gone_t = torch::tensor(gone, torch::kInt64).to(I.device);
  auto toks = I.live.seq_tokens.index_select(0, gone_t).to(torch::kCPU);
  auto stps = I.live.seq_steps.index_select(0, gone_t).to(torch::kCPU);
  auto lps = I.live.seq_logp.index_select(0, gone_t).to(torch::kCPU);
  auto ends = (I.live.pos.index_select(0, gone_t) + W).to(torch::kCPU);
  auto gsteps = I.live.st.global_step.index_select(0, gone_t).to(torch::kCPU);
  for (size_t g = 0; g < gone.size(); ++g) {
    const Slot& s = I.slots[static_cast<size_t>(gone[g])];
    SampleRecord& r = out[static_cast<size_t>(s.req)];
    fill_record(r, s, toks[g], stps[g], lps[g], ends[g].item<int64_t>());
    r.steps = gsteps[g].item<int64_t>();
    r.decode_s = wall.elapsed_s() - s.joined_s;
    stats.response_tokens += static_cast<int64_t>(r.response_ids.size());
    if (on_record) on_record(s.req, r);
  }
  done += static_cast<int64_t>(gone.size());
  if (progress) progress(done, N);
}

// Response (up to the first stop token or max_new_tokens) and tail (the rest of the final block,
// which ends at `block_end`) of one finished row, from its host copy.
void Sampler::Impl::Run::fill_record(SampleRecord& r, const Slot& s, const torch::Tensor& tokens_T,
                                     const torch::Tensor& steps_T, const torch::Tensor& logp_T, int64_t block_end) {
  const auto& p = prompts[static_cast<size_t>(s.req)];
  const int64_t L = static_cast<int64_t>(p.size());
  const int64_t end = std::min(block_end, L + cfg.max_new_tokens);
  auto ta = tokens_T.accessor<int64_t, 1>();
  auto sa = steps_T.accessor<int64_t, 1>();
  auto la = logp_T.accessor<float, 1>();
  r.seq_id = static_cast<int64_t>(first_seq_id + static_cast<uint64_t>(s.req));
  r.prompt_ids = p;
  r.stop_reason = "max_tokens";
  int64_t j = L;
  while (j < end && r.stop_reason == "max_tokens") {
    r.response_ids.push_back(ta[j]);
    r.step_map.push_back(sa[j]);
    if (cfg.record_logprobs) r.logprobs.push_back(la[j]);
    if (std::find(cfg.stop_ids.begin(), cfg.stop_ids.end(), ta[j]) != cfg.stop_ids.end()) r.stop_reason = "stop_token";
    ++j;
  }
  // The rest of the final block was decoded alongside the response (context of its draws).
  for (; j < block_end; ++j) {
    r.tail_ids.push_back(ta[j]);
    r.tail_steps.push_back(sa[j]);
    if (cfg.record_logprobs) r.tail_logprobs.push_back(la[j]);
  }
}

// The rows `keep` move down to rows [0, keep.size()): their cache rows, device state and mirrors.
void Sampler::Impl::Run::compact(const std::vector<int64_t>& keep) {
  // Row keep[i] -> row i; sources never precede targets.
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
  for (auto* t : I.live.fields()) *t = t->index_select(0, keep_t);
  std::vector<Slot> kept;
  for (auto i : keep) kept.push_back(I.slots[static_cast<size_t>(i)]);
  I.slots = std::move(kept);
}

}  // namespace dice::rollout
