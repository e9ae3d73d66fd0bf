// `dice bench learner`: one TraceRL update step as the trainer runs it (train::LearnerLoop: rows,
// old log-probs without grad, forward + backward over every row, all-reduce, clip, AdamW) on
// synthetic rollouts at SDAR shapes (random weights), beside a PyTorch peer run in the same call
// (tools/gpu/learner_peer.py: transformers Qwen3ForCausalLM on DICE's reference rows
// [prompt | clean | noisy] with a dense 4-D mask, forward + backward).
//
// Row tokens are counted in the reference layout (every round's row [prompt | clean | noisy]), so
// the layouts compare: dice's packed rows do the same work in fewer tokens. Useful FLOPs count
// what the loss needs, for either layout: matrix FLOPs of the layers on the row tokens the layout
// has, attention only on the query-key pairs the mask allows, lm_head only at the targets; a
// forward is 1x, forward + backward 3x. dice's step: the update's forward + backward 3x, plus 1x
// for the share of the rows the no-grad old log-probs pass scored (0 when the step is one update:
// the first update's old log-probs are its own forward's, LearnerOptions::reuse_first_forward);
// the peer's forward + backward 3x. Checkpointing's recompute is not counted. MFU = useful
// FLOP/s / the measured bf16 matmul peak (790 TFLOP/s on an H200, DESIGN §7).
//
// Paths: fast (the trainer's optim.fast: sparse plan, chunked log-probs, fused training
// operators), composite (fast without the fused operators: ScoreOptions::fused off), plain.
//
// `--parts` adds one step timed op by op (device synchronised at every outermost operator and
// autograd node, so it is slower than the timed step): attention, GEMMs, logits/log-softmax,
// other (norms, RoPE, elementwise, embedding, loss, gathers), optimizer, all-reduce. Backward
// nodes are attributed to the part of the forward operator that made them (sequence numbers).
// `--grad-check` compares bf16 fast-path log-probs and gradients with fp32 plain ones on a small
// shape (and fp32 fast with fp32 plain: the sparse attention on this device's SDPA), and the
// fused training operators (train_ops.h) with the composite ops, both bf16, against fp32.
#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#if DICE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dice/bench/bench.h"
#include "dice/dist/comm.h"
#include "dice/model/config.h"
#include "dice/model/fused_ops.h"
#include "dice/model/masks.h"
#include "dice/model/train_ops.h"
#include "dice/model/transformer.h"
#include "dice/rl/trace.h"
#include "dice/rollout/sampler.h"
#include "dice/train/learner_loop.h"
#include "dice/train/rl_config.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"
#include "dice/model/attention.h"
#include "dice/util/torch_compat.h"

namespace dice::bench {

c10::Device bench_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

namespace {

struct LearnerBenchArgs {
  std::vector<std::string> shapes = {"sdar-1.7b", "sdar-4b"};
  std::vector<std::string> strategies = {"static", "dynamic"};
  std::vector<std::string> paths = {"fast"};
  int64_t prompt_len = 1024;
  int64_t response_len = 4096;
  int64_t responses = 4;
  int64_t steps = 1;  // timed steps (after one warm-up step)
  std::string checkpoint = "auto";  // auto | all | off | N (layers)
  std::string optimizer = "auto";   // auto | on | off
  int zero1_of = 0;                 // > 1: rank 0 of this many ZeRO-1 learners (its AdamW share)
  int64_t sample_batch = 0;         // > 0: then sample as a colocated rank does (the learner's state kept)
  int64_t sample_len = 6144;        // its KV cache slots a row (sampler.max_len)
  int64_t attn_chunk = 256;
  int64_t logit_chunk = 2048;
  bool peer = true;
  int64_t peer_rows = 4;
  std::string peer_script = std::string(DICE_SOURCE_DIR) + "/tools/gpu/learner_peer.py";
  std::string python = DICE_PYTHON;
  std::string json_out;
  bool parts = false;
  bool grad_check = false;
  int64_t grad_check_layers = 2;
  int64_t layers = 0;  // > 0: every shape cut to its first `layers` layers (kernel profiles; no peer)
  double peak_flops = 790e12;
};

void sync(torch::Device dev) {
  if (dev.is_cuda()) torch::cuda::synchronize();
}

int64_t peak_bytes(torch::Device dev) {
#if DICE_WITH_CUDA
  if (dev.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index() < 0 ? 0 : dev.index())
      .allocated_bytes[0].peak;
#endif
  (void)dev;
  return -1;
}
int64_t device_bytes(torch::Device dev) {
#if DICE_WITH_CUDA
  if (dev.is_cuda()) return static_cast<int64_t>(at::cuda::getDeviceProperties(dev.index() < 0 ? 0 : dev.index())->totalGlobalMem);
#endif
  (void)dev;
  return int64_t{1} << 62;
}
void empty_cache(torch::Device dev) {
#if DICE_WITH_CUDA
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)dev;
}
void reset_peak(torch::Device dev) {
#if DICE_WITH_CUDA
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index() < 0 ? 0 : dev.index());
#endif
  (void)dev;
}

// ---- synthetic rollouts ----------------------------------------------------------------------
// Prompt and response tokens at random; the step map of a sampler on the absolute block grid:
// static = one token per denoising step (4 rounds per full block); dynamic = 0.9-threshold-like,
// each further token of a block joins the previous round with probability 0.6 (about 2 rounds).
std::vector<train::Rollout> synthetic_rollouts(const model::ModelConfig& c, int64_t P, int64_t R, int64_t n,
                                               const std::string& strategy, uint64_t seed) {
  const int64_t W = c.block_size, top = std::min<int64_t>(c.vocab_size, c.mask_token_id) - 1;
  std::mt19937_64 rng(seed);
  std::vector<train::Rollout> out;
  for (int64_t r = 0; r < n; ++r) {
    train::Rollout ro;
    ro.sample = ro.kept = r;
    ro.traj.advantage = (r % 2 == 0 ? 1.0 : -1.0) * (0.5 + 0.1 * static_cast<double>(r % 5));
    for (int64_t i = 0; i < P; ++i) ro.traj.prompt_ids.push_back(static_cast<int64_t>(rng() % top));
    const int64_t tail = (W - (P + R) % W) % W, end = P + R + tail;
    std::vector<int64_t> steps(static_cast<size_t>(end), -1);
    int64_t step = 0;
    for (int64_t b = P / W; b * W < end; ++b) {
      std::vector<int64_t> pos;
      for (int64_t i = std::max(b * W, P); i < (b + 1) * W; ++i) pos.push_back(i);
      std::shuffle(pos.begin(), pos.end(), rng);
      for (size_t k = 0; k < pos.size(); ++k) {
        const bool join = strategy == "dynamic" && k > 0 && (rng() % 10) < 6;
        if (k > 0 && !join) ++step;
        steps[static_cast<size_t>(pos[k])] = step;
      }
      ++step;
    }
    for (int64_t i = P; i < end; ++i) {
      const int64_t tok = static_cast<int64_t>(rng() % top);
      if (i < P + R) {
        ro.traj.response_ids.push_back(tok);
        ro.traj.step_map.push_back(steps[static_cast<size_t>(i)]);
      } else {
        ro.traj.tail_ids.push_back(tok);
        ro.traj.tail_steps.push_back(steps[static_cast<size_t>(i)]);
      }
    }
    out.push_back(std::move(ro));
  }
  return out;
}

// ---- FLOPs -----------------------------------------------------------------------------------
struct Work {
  int64_t tokens = 0;   // row tokens of the layout (no padding)
  int64_t pairs = 0;    // allowed query-key pairs
  int64_t targets = 0;
  int64_t rows = 0;
  int64_t row_len = 0;  // longest row
};

Work layout_work(const std::vector<train::Rollout>& rs, const model::ModelConfig& c, const std::string& layout) {
  rl::TraceOptions to;
  to.block_size = c.block_size;
  to.mask_token_id = c.mask_token_id;
  to.layout = layout;
  rl::ScoreOptions so;
  so.attn_chunk = 256;  // `allowed` counts the mask's pairs whatever the chunking
  Work w;
  for (const auto& r : rs) {
    for (auto& row : rl::trace_rows(r.traj, to)) {
      w.tokens += static_cast<int64_t>(row.ids.size());
      w.targets += static_cast<int64_t>(row.target_pos.size());
      w.row_len = std::max<int64_t>(w.row_len, static_cast<int64_t>(row.ids.size()));
      ++w.rows;
      w.pairs += rl::collate({row}, torch::kCPU, so).sparse->allowed;
    }
  }
  return w;
}

// Forward FLOPs of the work (see the header): layers' matrices, attention on allowed pairs, lm_head at targets.
double forward_flops(const model::ModelConfig& c, const Work& w) {
  const double layer_params = static_cast<double>(c.hidden_size) * (c.num_attention_heads + 2 * c.num_key_value_heads) *
                                  c.head_dim + static_cast<double>(c.num_attention_heads) * c.head_dim * c.hidden_size +
                              3.0 * c.hidden_size * c.intermediate_size;
  const double layers = static_cast<double>(c.num_hidden_layers);
  return 2.0 * layer_params * layers * w.tokens + 4.0 * c.num_attention_heads * c.head_dim * layers * w.pairs +
         2.0 * static_cast<double>(c.vocab_size) * c.hidden_size * w.targets;
}

// ---- parts: op-by-op device time ---------------------------------------------------------------
// Frames are the outermost operators (and every autograd node, reentrant ones included), timed
// exclusively of nested frames with a device synchronisation at both ends. A frame's part: the
// innermost dice::<part> user scope around it (attention, logits, optimizer, allreduce), else
// GEMM for linear / matmul / mm / addmm / bmm, else other; an autograd node takes the part of the
// forward operator (or scope) whose sequence-number range holds the node's.
struct PartProfiler {
  struct Frame {
    double start = 0, child = 0;
    std::string part;
    bool op = false;  // an operator (its nested operators are not frames)
    uint64_t seq0 = 0;  // an operator's sequence number at its start
  };
  static PartProfiler* active;
  std::mutex mu;
  std::map<std::string, double> seconds;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> op_ranges, scope_ranges;
  torch::Device dev = torch::kCPU;
  at::CallbackHandle handle = 0;
  Timer clock;

  struct ThreadState {
    std::vector<Frame> frames;
    std::vector<std::string> labels;
    std::vector<uint64_t> label_seq;
    std::vector<int> kinds;  // per record: 0 = ignored, 1 = frame, 2 = label
  };
  static ThreadState& ts() {
    thread_local ThreadState s;
    return s;
  }

  static std::string name_part(const char* name) {
    static const char* gemm[] = {"aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm"};
    for (const char* g : gemm)
      if (std::strcmp(name, g) == 0) return "gemm";
    return "other";
  }
  std::string seq_part(uint64_t s) {
    std::lock_guard<std::mutex> g(mu);
    for (const auto& [a, b, p] : op_ranges)
      if (s >= a && s < b) return p;
    for (const auto& [a, b, p] : scope_ranges)
      if (s >= a && s < b) return p;
    return "other";
  }

  void start() {
    active = this;
    clock.reset();
    handle = at::addGlobalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              active->on_start(fn);
              return nullptr;
            },
            [](const at::RecordFunction& fn, at::ObserverContext*) { active->on_end(fn); })
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE}));
  }
  void stop() {
    at::removeCallback(handle);
    active = nullptr;
  }

  double now() {
    sync(dev);
    return clock.elapsed_s();
  }
  void on_start(const at::RecordFunction& fn) {
    auto& t = ts();
    if (at::in_parallel_region()) {  // CPU worker threads run parts of an operator timed elsewhere
      t.kinds.push_back(0);
      return;
    }
    const char* name = fn.name();
    if (fn.scope() == at::RecordScope::USER_SCOPE) {
      if (std::strncmp(name, "dice::", 6) == 0) {
        t.labels.push_back(name + 6);
        t.label_seq.push_back(at::sequence_number::peek());
        t.kinds.push_back(2);
      } else {
        t.kinds.push_back(0);
      }
      return;
    }
    const bool backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
    // Tensor::backward is an operator too (aten::_backward); the nodes it runs are the frames
    // (on a GPU in the engine's device thread, so it would overlap them).
    const bool nested = !backward && !t.frames.empty() && t.frames.back().op;
    if (nested || (!backward && (std::strcmp(name, "aten::_backward") == 0 || std::strcmp(name, "aten::backward") == 0))) {  // nested operator: part of its parent
      t.kinds.push_back(0);
      return;
    }
    Frame f;
    f.op = !backward;
    if (backward) f.part = fn.seqNr() >= 0 ? seq_part(static_cast<uint64_t>(fn.seqNr())) : "other";
    else f.part = !t.labels.empty() ? t.labels.back() : name_part(name);
    if (!backward) f.seq0 = at::sequence_number::peek();
    f.start = now();
    t.frames.push_back(f);
    t.kinds.push_back(1);
  }
  void on_end(const at::RecordFunction& fn) {
    auto& t = ts();
    if (t.kinds.empty()) return;
    const int kind = t.kinds.back();
    t.kinds.pop_back();
    if (kind == 2) {
      std::lock_guard<std::mutex> g(mu);
      scope_ranges.emplace_back(t.label_seq.back(), at::sequence_number::peek(), t.labels.back());
      t.labels.pop_back();
      t.label_seq.pop_back();
      return;
    }
    if (kind == 0) return;
    (void)fn;
    Frame f = t.frames.back();
    t.frames.pop_back();
    const double end = now(), total = end - f.start;
    std::lock_guard<std::mutex> g(mu);
    if (f.op) op_ranges.emplace_back(f.seq0, at::sequence_number::peek(), f.part);
    seconds[f.part] += total - f.child;
    if (!t.frames.empty()) t.frames.back().child += total;
  }
};
PartProfiler* PartProfiler::active = nullptr;

// ---- the bench ---------------------------------------------------------------------------------
// Which SDPA kernel a sparse-plan chunk gets here (bf16, GQA folded, an additive bias mask): the
// one every fast-path attention call takes, forward and backward.
std::string sdpa_backend(torch::Device dev) {
#if DICE_TORCH_AT_LEAST(2, 1)
  auto o = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
  auto q = torch::randn({1, 8, 2 * 1280, 128}, o).requires_grad_(true);
  auto k = torch::randn({1, 8, 2560, 128}, o), v = torch::randn({1, 8, 2560, 128}, o);
  auto mask = model::prepare_attention_mask(torch::ones({1, 1, 1280, 2560}, o.dtype(torch::kBool)), 2, torch::kBFloat16);
  const int64_t c = at::_fused_sdp_choice(q, k, v, mask, 0.0, false, 1.0 / std::sqrt(128.0));
  static const char* names[] = {"math", "flash", "efficient (memory-efficient, cutlass)", "cudnn", "overrideable"};
  return str("SDPA backend for a sparse-plan chunk (bf16, bias mask, q 2x1280 x k 2560, D 128): ",
             c >= 0 && c < 5 ? names[c] : "error", " (", c, "), torch ", TORCH_VERSION);
#else
  (void)dev;
  return "SDPA: not in this torch";
#endif
}

model::Transformer random_master(const model::ModelConfig& cfg, torch::Device dev, uint64_t seed) {
  torch::NoGradGuard ng;
  model::Transformer m(cfg, torch::kFloat32, dev);
  torch::manual_seed(static_cast<int64_t>(seed));
  for (auto& p : m->named_parameters(true)) {
    if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.8, 1.2);
    else p.value().normal_(0.0, 0.02);
  }
  return m;
}

std::string fmt_bytes(int64_t b) {
  if (b < 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1ll << 30));
  return buf;
}

// --sample-batch: after the timed steps, what a colocated rank does next -- sample on the learner's
// compute copy (the trainer's actor shares it, rl_trainer.cpp) with the learner's weights, gradient
// buffers and AdamW state still allocated: one generate() of `sample_batch` prompts with a KV cache
// of sample_batch x sample_len slots (sampler.max_batch x max_len), a few tokens each. Its peak is
// the sampling phase's memory of such a rank (NCCL's buffers aside).
nlohmann::json sample_colocated(train::LearnerLoop& learner, const LearnerBenchArgs& a, int64_t prompt_len,
                                torch::Device dev) {
  rollout::SamplerConfig sc;
  sc.max_batch = a.sample_batch;
  sc.max_len = a.sample_len;
  sc.max_new_tokens = 8;
  sc.strategy = "static";
  sc.stop_ids = {};
  const auto& mc = learner.compute_model()->config();
  DICE_REQUIRE(prompt_len + sc.max_new_tokens + mc.block_size <= a.sample_len, "bench learner: --sample-len ",
               a.sample_len, " leaves no room for a prompt of ", prompt_len, " tokens and ", sc.max_new_tokens,
               " new ones.");  // (+ a block: the prompt's last block is partly the response's)
  const int64_t ids = std::min<int64_t>(mc.vocab_size, 50000);
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(a.sample_batch));
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int64_t t = 0; t < prompt_len; ++t) {
      const int64_t id = static_cast<int64_t>((i * 7919 + static_cast<size_t>(t) * 104729) % static_cast<size_t>(ids));
      prompts[i].push_back(id == mc.mask_token_id ? (id + 1) % ids : id);
    }
  empty_cache(dev);
  reset_peak(dev);
  Timer t;
  int64_t tokens = 0;
  {
    rollout::Sampler sampler(learner.compute_model(), sc);
    for (const auto& r : sampler.generate(prompts, 0)) tokens += static_cast<int64_t>(r.response_ids.size());
    sync(dev);
  }
  const int64_t peak = peak_bytes(dev);
  const double sec = t.elapsed_s();
  std::printf("    colocated sampling on the learner's compute copy (its state kept): %ld x %ld KV cache slots, "
              "%ld tokens in %.2f s, peak %s of %s\n", static_cast<long>(a.sample_batch), static_cast<long>(a.sample_len),
              static_cast<long>(tokens), sec, fmt_bytes(peak).c_str(),
              dev.is_cuda() ? fmt_bytes(device_bytes(dev)).c_str() : "host memory");
  std::fflush(stdout);
  empty_cache(dev);
  return {{"batch", a.sample_batch}, {"max_len", a.sample_len}, {"tokens", tokens}, {"seconds", sec}, {"peak_bytes", peak}};
}

void run_bench(const LearnerBenchArgs& a) {
  const auto dev = bench_device();
  if (!dev.is_cuda()) log::warn("bench learner: no GPU; running on CPU in fp32 (numbers are not meaningful)");
  auto comm = dist::self_comm(dev, {"learners", "learner", 0});
  if (dev.is_cuda()) std::printf("attention: %s\n", sdpa_backend(dev).c_str());
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-10s %-8s %-9s %6s %7s %12s %12s %7s %9s %6s %10s %9s\n", "shape", "strategy", "path", "resp",
              "rows", "ref tok/s", "peer tok/s", "ratio", "TFLOP/s", "MFU", "peak mem", "step s");
  std::fflush(stdout);
  for (const auto& shape : a.shapes) {
    auto cfg = model::ModelConfig::preset(shape);
    if (a.layers > 0) cfg.num_hidden_layers = std::min(cfg.num_hidden_layers, a.layers);
    const int64_t P = shape == "tiny" ? std::min<int64_t>(a.prompt_len, 64) : a.prompt_len;
    const int64_t R = shape == "tiny" ? std::min<int64_t>(a.response_len, 256) : a.response_len;
    const bool optim = a.optimizer == "on" || (a.optimizer == "auto" && (shape != "sdar-8b" || a.zero1_of > 1));
    const double adam_share = a.zero1_of > 1 ? 1.0 / a.zero1_of : 1.0;  // of the AdamW moments here
    // The peer first, while this process holds no GPU memory.
    nlohmann::json peer;
    if (a.peer) {
      std::string cmd = str(a.python, " ", a.peer_script, " --shape ", shape, " --prompt-len ", P, " --response-len ", R,
                            " --rows ", a.peer_rows, a.checkpoint == "all" ? " --checkpoint" : "", " 2>&1");
      peer = last_json_line(run_capture(cmd, "The learner peer"), "The learner peer");
      log::info("bench learner: peer ", shape, ": ", peer["row_tokens_per_s"].get<double>(), " row tok/s (",
                peer["impl"].get<std::string>(), ")");
    }
    Timer mt;
    auto master = random_master(cfg, dev, 1);
    log::info("bench learner: ", shape, " fp32 master weights on ", dev.str(), " in ", mt.elapsed_s(), " s");
    for (const auto& strategy : a.strategies) {
      auto rollouts = synthetic_rollouts(cfg, P, R, a.responses, strategy, 17);
      const Work ref = layout_work(rollouts, cfg, "reference"), packed = layout_work(rollouts, cfg, "packed");
      const double fwd_flops = forward_flops(cfg, packed);
      // Checkpointed layers: "auto" from an estimate of what fits (activations of a layer about
      // 2 bytes x (24 hidden + 6 ffn) per token unfused, x (18 hidden + 3.5 ffn) with the fused
      // operators), all of them if that still runs out of memory.
      auto layers_to_checkpoint = [&](bool fused) -> int64_t {
        if (a.checkpoint == "all") return -1;
        if (a.checkpoint == "off") return 0;
        if (a.checkpoint != "auto") return std::stoll(a.checkpoint);
        const double params = static_cast<double>(cfg.num_parameters());
        const double fixed = params * (4 + 4 + (optim ? 8 * adam_share : 0) + (dev.is_cuda() ? 4 : 0)) +
                             4.0 * a.logit_chunk * cfg.vocab_size * 4 + 4e9;
        const double per_token = fused ? 18.0 * cfg.hidden_size + 3.5 * cfg.intermediate_size
                                       : 24.0 * cfg.hidden_size + 6.0 * cfg.intermediate_size;
        const double per_layer = 2.0 * per_token * packed.row_len;
        const double avail = 0.92 * static_cast<double>(device_bytes(dev)) - fixed;
        const int64_t plain_layers = avail <= 0 ? 0 : static_cast<int64_t>(avail / per_layer);
        const int64_t n = std::max<int64_t>(0, cfg.num_hidden_layers - plain_layers);
        return n >= cfg.num_hidden_layers ? -1 : n;
      };
      for (const auto& path : a.paths) {
        const int64_t ckpt_layers = layers_to_checkpoint(path == "fast" && dev.is_cuda());
        train::RlRunConfig rc;
        rc.trace.layout = "packed";
        rc.optim.fast = path != "plain";
        rc.optim.attn_chunk = a.attn_chunk;
        rc.optim.logit_chunk = a.logit_chunk;
        rc.optim.checkpoint_layers = path != "plain" ? ckpt_layers : 0;
        rc.optim.responses_per_update = a.responses;
        rc.optim.micro_batch_tokens = 1;  // one row (one response) per forward/backward
        rc.optim.grad_clip = 1.0;
        train::LearnerLoop::Options lo;
        lo.optimizer = optim;
        lo.zero1_of = a.zero1_of;
        lo.sync_timing = true;
        std::unique_ptr<train::LearnerLoop> lp;
        bool fits = true;
        for (int attempt = 0;; ++attempt) {
          try {
            lp = std::make_unique<train::LearnerLoop>(rc, master, *comm, std::nullopt, lo);
            if (path == "composite") lp->set_fused(false);
            lp->step(rollouts);  // warm-up: allocator, kernels, plans
            sync(dev);
            break;
          } catch (const c10::Error& e) {
            if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
            lp.reset();
            for (auto& p : master->parameters()) p.mutable_grad() = torch::Tensor();
            empty_cache(dev);
            if (rc.optim.checkpoint_layers < 0 || attempt > 0 || path == "plain") {
              fits = false;
              break;
            }
            log::warn("bench learner: ", shape, " ran out of memory with ", rc.optim.checkpoint_layers,
                      " checkpointed layers; again with all layers checkpointed");
            rc.optim.checkpoint_layers = -1;
          }
        }
        if (!fits) {
          std::printf("%-10s %-8s %-9s does not fit on this device (%s, %s)\n", shape.c_str(), strategy.c_str(),
                      path.c_str(),
                      !optim ? "without optimizer state"
                      : a.zero1_of > 1 ? str("with 1/", a.zero1_of, " of the AdamW state").c_str()
                                       : "with AdamW state",
                      rc.optim.checkpoint_layers ? "checkpointed layers" : "no checkpointing");
          std::fflush(stdout);
          results.push_back({{"shape", shape}, {"strategy", strategy}, {"path", path}, {"fits", false}});
          continue;
        }
        auto& learner = *lp;
        reset_peak(dev);
        double sec = 0, old_s = 0, upd_s = 0, opt_s = 0, ar_s = 0;
        nlohmann::json m;
        for (int64_t s = 0; s < a.steps; ++s) {
          Timer t;
          m = learner.step(rollouts);
          sync(dev);
          sec += t.elapsed_s();
          old_s += m["time_old_logp_s"].get<double>();
          upd_s += m["time_update_s"].get<double>();
          opt_s += m["time_optimizer_s"].get<double>();
          ar_s += m["time_allreduce_s"].get<double>();
        }
        const double steps = static_cast<double>(a.steps);
        sec /= steps;
        const double step_row_tokens = m["row_tokens"].get<double>();
        const double old_share = step_row_tokens > 0 ? m["old_logp_row_tokens"].get<double>() / step_row_tokens : 0.0;
        const double useful = (3.0 + old_share) * fwd_flops;
        const int64_t peak = peak_bytes(dev);
        const double tps = static_cast<double>(ref.tokens) / sec;
        const double ptps = a.peer ? peer["row_tokens_per_s"].get<double>() : 0.0;
        const double tflops = useful / sec / 1e12, mfu = useful / sec / a.peak_flops;
        std::printf("%-10s %-8s %-9s %6ld %7ld %12.1f %12.1f %6.2fx %9.1f %5.1f%% %10s %9.3f\n", shape.c_str(),
                    strategy.c_str(), path.c_str(), static_cast<long>(a.responses), static_cast<long>(ref.rows), tps,
                    ptps, ptps > 0 ? tps / ptps : 0.0, tflops, 100 * mfu, fmt_bytes(peak).c_str(), sec);
        std::printf("    per step: old log-probs %.3f s | forward+backward %.3f s | all-reduce %.3f s | clip+AdamW+"
                    "bf16 copy %.3f s; reference layout %ld rows = %ld tokens, packed %ld rows = %ld tokens, %ld "
                    "targets; useful %.1f TFLOP = forward x (3 update + %.2f no-grad old log-probs pass) (pairs: "
                    "packed %.3g, reference %.3g)%s%s\n",
                    old_s / steps, (upd_s - opt_s - ar_s) / steps, ar_s / steps, opt_s / steps,
                    static_cast<long>(ref.rows), static_cast<long>(ref.tokens), static_cast<long>(packed.rows),
                    static_cast<long>(packed.tokens), static_cast<long>(packed.targets), useful / 1e12, old_share,
                    static_cast<double>(packed.pairs), static_cast<double>(ref.pairs),
                    rc.optim.checkpoint_layers == 0 ? ""
                    : rc.optim.checkpoint_layers < 0 ? "; every layer checkpointed"
                                                     : str("; ", rc.optim.checkpoint_layers, " layers checkpointed").c_str(),
                    !optim ? "; no optimizer state (--optimizer off)"
                    : a.zero1_of > 1 ? str("; AdamW state of 1/", a.zero1_of, " (rank 0 of ", a.zero1_of,
                                           " ZeRO-1 learners, nothing broadcast)").c_str()
                                     : "");
        std::fflush(stdout);
        const nlohmann::json colocated = a.sample_batch > 0 ? sample_colocated(learner, a, P, dev) : nlohmann::json();
        nlohmann::json row = {{"shape", shape}, {"strategy", strategy}, {"path", path}, {"prompt_len", P},
                              {"response_len", R}, {"responses", a.responses}, {"reference_rows", ref.rows},
                              {"reference_tokens", ref.tokens}, {"packed_tokens", packed.tokens},
                              {"targets", packed.targets}, {"seconds", sec}, {"row_tokens_per_s", tps},
                              {"useful_flops", useful}, {"tflops", tflops}, {"mfu", mfu}, {"peak_bytes", peak},
                              {"time_old_logp_s", old_s / steps}, {"time_update_s", upd_s / steps},
                              {"time_optimizer_s", opt_s / steps}, {"time_allreduce_s", ar_s / steps},
                              {"old_logp_share", old_share},
                              {"checkpoint", rc.optim.checkpoint_layers}, {"optimizer", optim},
                              {"zero1_of", a.zero1_of},
                              {"loss", m["loss"]}, {"grad_norm", m["grad_norm"]}};
        if (!colocated.is_null()) row["colocated_sampling"] = colocated;
        if (a.peer) {
          row["peer"] = peer;
          row["ratio"] = ptps > 0 ? tps / ptps : 0.0;
          const double peer_useful = 3.0 * forward_flops(cfg, ref) / static_cast<double>(ref.rows);
          const double peer_row_s = peer["seconds_per_row"].get<double>();
          row["peer_mfu"] = peer_useful / peer_row_s / a.peak_flops;
          std::printf("    peer: %s, %.3f s per row of %ld tokens, %.1f%% MFU (same FLOP count on its rows), peak %s\n",
                      peer["impl"].get<std::string>().c_str(), peer_row_s, static_cast<long>(ref.row_len),
                      100 * row["peer_mfu"].get<double>(), fmt_bytes(peer["peak_bytes"].get<int64_t>()).c_str());
        }
        if (a.parts) {
          PartProfiler prof;
          prof.dev = dev;
          sync(dev);
          prof.start();
          Timer pt;
          learner.step(rollouts);
          sync(dev);
          const double total = pt.elapsed_s();
          prof.stop();
          double sum = 0;
          for (const auto& [k, v] : prof.seconds) sum += v;
          std::printf("    parts (one step timed op by op, synchronised: %.3f s, %.3f s in operators):", total, sum);
          nlohmann::json pj;
          for (const char* k : {"attention", "gemm", "logits", "fused_ops", "other", "optimizer", "allreduce"}) {
            const double v = prof.seconds.count(k) ? prof.seconds[k] : 0.0;
            std::printf(" %s %.1f%%", k, sum > 0 ? 100 * v / sum : 0.0);
            pj[k] = v;
          }
          std::printf("\n");
          std::fflush(stdout);
          row["parts_s"] = pj;
          row["parts_wall_s"] = total;
        }
        results.push_back(row);
      }
    }
  }
  if (!a.json_out.empty()) fs::write_file(a.json_out, results.dump(1));
}

// The fused training operators one by one (train_ops.h) against their composite ops, both in
// bf16, and both against the composite ops in fp32: forward values and every input's gradient.
// Passes when the fused one is as close to fp32 as the composite bf16 one (up to 1.5x + a bit).
bool op_check(torch::Device dev) {
  namespace tr = model::train;
  auto bf = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
  if (!tr::on_kernels(torch::empty({1}, bf))) {
    std::printf("op-check: no CUDA kernels on %s (the fused operators are the composite ops here)\n", dev.str().c_str());
    return true;
  }
  torch::manual_seed(7);
  bool ok = true;
  // f(inputs) -> outputs; weights g per output; reports forward |diff| and gradient rel. L2 per input.
  auto check = [&](const char* name, const std::vector<torch::Tensor>& inputs,
                   const std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&, bool)>& f) {
    auto run = [&](bool fused, torch::Dtype dt) {
      std::vector<torch::Tensor> in;
      for (const auto& x : inputs) in.push_back(x.detach().to(dt).requires_grad_(x.is_floating_point()));
      auto outs = f(in, fused);
      torch::Tensor loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
      std::vector<torch::Tensor> vals;
      for (size_t i = 0; i < outs.size(); ++i) {
        auto o = outs[i].to(torch::kFloat64);
        auto wgt = torch::sin(torch::arange(o.numel(), o.options()).view(o.sizes()) * (0.37 + 0.11 * i));
        loss = loss + (o * wgt).sum();
        vals.push_back(o.detach());
      }
      loss.backward();
      for (auto& x : in) vals.push_back(x.grad().defined() ? x.grad().to(torch::kFloat64) : torch::Tensor());
      return vals;
    };
    auto fu = run(true, torch::kBFloat16), co = run(false, torch::kBFloat16), ref = run(false, torch::kFloat32);
    std::string line;
    bool pass = true;
    for (size_t i = 0; i < fu.size(); ++i) {
      if (!ref[i].defined()) continue;
      auto rel = [&](const torch::Tensor& x) { return ((x - ref[i]).norm() / ref[i].norm().clamp_min(1e-30)).item<double>(); };
      const double e_f = rel(fu[i]), e_c = rel(co[i]);
      const double fc = ((fu[i] - co[i]).norm() / co[i].norm().clamp_min(1e-30)).item<double>();
      const bool p = e_f <= 1.5 * e_c + 2e-3;
      pass = pass && p;
      line += str(i < fu.size() - inputs.size() ? " out" : " d", i < fu.size() - inputs.size() ? i : i - (fu.size() - inputs.size()),
                  ": fused vs composite ", fc, ", vs fp32 fused ", e_f, " composite ", e_c, p ? "" : " (!)", ";");
    }
    ok = ok && pass;
    std::printf("op-check %s %s (rel. L2):%s\n", pass ? "PASS" : "FAIL", name, line.c_str());
    std::fflush(stdout);
  };
  auto fp = [&](std::vector<int64_t> shape) { return torch::randn(shape, torch::TensorOptions().device(dev)); };
  for (int64_t H : {2048, 128}) {
    check(H == 128 ? "rms_norm[H=128]" : "rms_norm[H=2048]", {fp({3, 111, H}), 1 + 0.1 * fp({H})},
          [](const std::vector<torch::Tensor>& in, bool fused) {
            return std::vector<torch::Tensor>{fused ? tr::rms_norm(in[0], in[1], 1e-6)
                                                    : model::fused::rms_norm_reference(in[0], in[1], 1e-6)};
          });
  }
  {
    const int64_t B = 2, L = 53, hq = 16, hkv = 8, D = 128;
    auto ang = fp({B, L, D / 2}) * 3;
    auto emb = torch::cat({ang, ang}, -1);
    auto cos = emb.cos(), sin = emb.sin();
    sin = torch::cat({sin.narrow(-1, 0, D / 2).neg(), sin.narrow(-1, D / 2, D / 2)}, -1);
    check("qk_norm_rope", {fp({B, L, (hq + 2 * hkv) * D}), 1 + 0.1 * fp({D}), 1 + 0.1 * fp({D}), cos, sin},
          [&](const std::vector<torch::Tensor>& in, bool fused) {
            auto c = in[3].detach(), s = in[4].detach();
            std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> r;
            if (fused) {
              r = tr::qk_norm_rope(in[0], in[1], in[2], 1e-6, c, s, hq, hkv);
            } else {  // the unfused attention's ops
              auto heads = in[0].view({B, L, hq + 2 * hkv, D});
              auto q = model::fused::rms_norm_reference(heads.narrow(2, 0, hq), in[1], 1e-6).transpose(1, 2);
              auto k = model::fused::rms_norm_reference(heads.narrow(2, hq, hkv), in[2], 1e-6).transpose(1, 2);
              r = {model::fused::rope_reference(q, c.unsqueeze(1), s.unsqueeze(1)),
                   model::fused::rope_reference(k, c.unsqueeze(1), s.unsqueeze(1)), heads.narrow(2, hq + hkv, hkv).transpose(1, 2)};
            }
            return std::vector<torch::Tensor>{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
          });
  }
  check("silu_mul", {fp({3, 77, 2 * 6144}) * 2}, [](const std::vector<torch::Tensor>& in, bool fused) {
    const int64_t F = in[0].size(-1) / 2;
    return std::vector<torch::Tensor>{fused ? tr::silu_mul(in[0])
                                            : torch::silu(in[0].narrow(-1, 0, F)) * in[0].narrow(-1, F, F)};
  });
  return ok;
}

// bf16 fast path against fp32 plain path (log-probs, gradients), and fp32 fast against fp32 plain.
void run_grad_check(const LearnerBenchArgs& a) {
  const auto dev = bench_device();
  const std::string shape = a.shapes.empty() ? "sdar-1.7b" : a.shapes[0];
  auto cfg = model::ModelConfig::preset(shape);
  cfg.num_hidden_layers = std::min(cfg.num_hidden_layers, a.grad_check_layers);
  const int64_t P = std::min<int64_t>(a.prompt_len, 133), R = std::min<int64_t>(a.response_len, 254);
  auto master = random_master(cfg, dev, 3);
  model::Transformer m16(cfg, dev.is_cuda() ? torch::kBFloat16 : torch::kFloat32, dev);
  {
    torch::NoGradGuard ng;
    auto src = master->named_parameters();
    for (auto& p : m16->named_parameters()) p.value().copy_(src[p.key()]);
  }
  bool ok = true;
  for (const auto& strategy : a.strategies) {
    auto rs = synthetic_rollouts(cfg, P, R, 3, strategy, 5);
    rl::TraceOptions to;
    to.mask_token_id = cfg.mask_token_id;
    std::vector<rl::TraceRow> rows;
    for (size_t i = 0; i < rs.size(); ++i) {
      auto r = rl::trace_rows(rs[i].traj, to, static_cast<int64_t>(i));
      rows.insert(rows.end(), r.begin(), r.end());
    }
    rl::ScoreOptions fast;
    fast.attn_chunk = 64;
    fast.logit_chunk = 100;
    auto run = [&](model::Transformer& m, const rl::ScoreOptions& so) {
      auto b = rl::collate(rows, dev, so);
      m->zero_grad();
      auto lp = rl::token_logprobs(m, b, so);
      auto w = (((b.target_traj_N * 31 + b.target_resp_N * 7) % 11).to(torch::kFloat32) - 5).to(dev);
      (lp * w).sum().backward();
      std::vector<torch::Tensor> g;
      for (auto& p : m->parameters()) g.push_back(p.grad().to(torch::kFloat32).flatten());
      return std::make_pair(lp.detach().to(torch::kFloat32), torch::cat(g));
    };
    auto [lp32, g32] = run(master, rl::plain_scoring());
    auto [lpf, gf] = run(master, fast);
    auto [lp16, g16] = run(m16, fast);
    rl::ScoreOptions composite = fast;
    composite.fused = false;
    auto [lpc, gc] = run(m16, composite);
    auto rel = [](const torch::Tensor& x, const torch::Tensor& y) {
      return ((x - y).norm() / y.norm().clamp_min(1e-30)).item<double>();
    };
    auto cos = [](const torch::Tensor& x, const torch::Tensor& y) {
      return (x.to(torch::kFloat64).dot(y.to(torch::kFloat64)) / (x.to(torch::kFloat64).norm() * y.to(torch::kFloat64).norm()))
          .item<double>();
    };
    const double lp_f = (lpf - lp32).abs().max().item<double>(), g_f = rel(gf, g32);
    const double lp_16 = (lp16 - lp32).abs().max().item<double>(), g_16 = rel(g16, g32), c16 = cos(g16, g32);
    const double g_c = rel(gc, g32), c_fc = cos(g16, gc), lp_fc = (lp16 - lpc).abs().max().item<double>();
    const double lp_c = (lpc - lp32).abs().max().item<double>();
    // The fused operators must be as close to fp32 as the composite bf16 ops are (their rounding
    // points differ, so neither equals the other).
    const bool fused_ok = g_16 <= 1.5 * g_c + 1e-3 && lp_16 <= 1.5 * lp_c + 1e-3 && c_fc > 0.99;
    const bool pass = lp_f < 1e-3 && g_f < 1e-3 && g_16 < 0.1 && c16 > 0.99 && fused_ok;
    ok = ok && pass;
    std::printf("grad-check %s %s (%s, %ld layers, %ld targets, %s): fp32 fast vs plain: log-prob max |diff| %.3g, "
                "gradient rel. L2 %.3g | bf16 fast vs fp32 plain: log-prob max |diff| %.3g, gradient rel. L2 %.3g, "
                "cosine %.6f\n",
                pass ? "PASS" : "FAIL", strategy.c_str(), shape.c_str(), static_cast<long>(cfg.num_hidden_layers),
                static_cast<long>(lp32.size(0)), dev.str().c_str(), lp_f, g_f, lp_16, g_16, c16);
    std::printf("    fused training operators (%s) vs composite ops, both bf16: log-prob max |diff| %.3g, gradient "
                "cosine %.6f; against fp32 plain: fused log-prob %.3g / gradient rel. L2 %.3g, composite %.3g / %.3g\n",
                model::train::on_kernels(torch::empty({1}, torch::TensorOptions().dtype(torch::kBFloat16).device(dev)))
                    ? "CUDA kernels"
                    : "composite fallback",
                lp_fc, c_fc, lp_16, g_16, lp_c, g_c);
    std::fflush(stdout);
  }
  ok = op_check(dev) && ok;
  DICE_REQUIRE(ok, "bench learner --grad-check: a comparison is outside its bound (see above).");
}

void setup_learner(CLI::App& cmd) {
  auto a = std::make_shared<LearnerBenchArgs>();
  auto shapes = std::make_shared<std::string>("sdar-1.7b,sdar-4b");
  auto strategies = std::make_shared<std::string>("static,dynamic");
  auto paths = std::make_shared<std::string>("fast");
  cmd.add_option("--shapes", *shapes, "model shapes (presets), comma-separated");
  cmd.add_option("--strategies", *strategies, "step maps: static, dynamic (comma-separated)");
  cmd.add_option("--paths", *paths,
                 "learner scoring paths: fast, composite (fast without the fused operators), plain (comma-separated)");
  cmd.add_option("--prompt-len", a->prompt_len, "prompt tokens");
  cmd.add_option("--response-len", a->response_len, "response tokens");
  cmd.add_option("--responses", a->responses, "responses per step (one optimizer update)");
  cmd.add_option("--steps", a->steps, "timed steps after one warm-up step");
  cmd.add_option("--checkpoint", a->checkpoint,
                 "activation checkpointing: auto (what fits), all, off, or a number of layers (the peer: only with all)");
  cmd.add_option("--optimizer", a->optimizer, "AdamW state and update: auto (off for 8B only), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd.add_option("--zero1-of", a->zero1_of,
                 "measure rank 0 of N ZeRO-1 learners: its share of the AdamW state (1/N) and update, nothing "
                 "broadcast (optimizer auto: on, 8B included)")
      ->check(CLI::Range(0, 4096));
  cmd.add_option("--sample-batch", a->sample_batch,
                 "then sample N prompts on the learner's compute copy, its state kept (a colocated rank's sampling peak)");
  cmd.add_option("--sample-len", a->sample_len, "KV cache slots a row for --sample-batch (sampler.max_len)");
  cmd.add_option("--attn-chunk", a->attn_chunk, "optim.attn_chunk");
  cmd.add_option("--logit-chunk", a->logit_chunk, "optim.logit_chunk");
  cmd.add_flag("!--no-peer", a->peer, "skip the PyTorch peer");
  cmd.add_option("--peer-rows", a->peer_rows, "reference rows the peer times");
  cmd.add_option("--peer-script", a->peer_script, "the peer script");
  cmd.add_option("--python", a->python, "python with torch + transformers for the peer");
  cmd.add_option("--json", a->json_out, "write results as JSON");
  cmd.add_flag("--parts", a->parts, "one more step timed op by op: time per part");
  cmd.add_flag("--grad-check", a->grad_check, "bf16 fast path vs fp32 plain path on a cut-down first shape");
  cmd.add_option("--grad-check-layers", a->grad_check_layers, "layers of the --grad-check model");
  cmd.add_option("--layers", a->layers, "cut every shape to its first N layers (e.g. under ncu; needs --no-peer)");
  cmd.add_option("--peak-flops", a->peak_flops, "bf16 matmul peak for MFU (FLOP/s)");
  cmd.callback([a, shapes, strategies, paths] {
    a->shapes = split_list(*shapes);
    a->strategies = split_list(*strategies);
    a->paths = split_list(*paths);
    for (const auto& s : a->strategies)
      DICE_REQUIRE(s == "static" || s == "dynamic", "bench learner: unknown strategy '", s, "' (static, dynamic).");
    for (const auto& p : a->paths)
      DICE_REQUIRE(p == "fast" || p == "composite" || p == "plain", "bench learner: unknown path '", p,
                   "' (fast, composite, plain).");
    DICE_REQUIRE(a->layers == 0 || !a->peer || a->grad_check,
                 "bench learner: --layers cuts the model, so the peer's full model would not compare; add --no-peer.");
    DICE_REQUIRE(a->responses >= 1 && a->steps >= 1 && a->prompt_len >= 1 && a->response_len >= 1,
                 "bench learner: --responses, --steps, --prompt-len and --response-len must be >= 1.");
    if (a->grad_check) run_grad_check(*a);
    else run_bench(*a);
  });
}

}  // namespace

BenchSuite learner_suite() {
  return {"learner",
          "TraceRL update step: row tokens/s, MFU and time per part vs a transformers peer",
          setup_learner};
}

}  // namespace dice::bench
