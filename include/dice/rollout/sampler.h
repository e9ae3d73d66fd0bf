#pragma once
// The batched block-diffusion sampler (SDAR decoding, recipe §2.4) with the step maps TraceRL
// needs (recipe §4.6).
//
// Contract:
//  - Block grid aligned to absolute position 0. Full prompt blocks are prefilled (block-causal)
//    into a KV cache; the prompt's last len % block_size tokens share the first decode block with
//    mask tokens (those positions are fixed, never generated).
//  - Each block is denoised by forwards of the block attending to the cache plus itself
//    (bidirectionally); each step draws a token at every masked position and unmasks some of them
//    (static / dynamic / sequential, see unmask.h). Unmasked tokens never change. When a block
//    has no masks left, the next forward of that row writes the final block's K/V ("commit") and
//    the row moves to the next block. Rows at different phases share every forward.
//  - A sequence stops after the block holding its first stop token (the response ends with that
//    token) or once max_new_tokens are generated (the response is cut to max_new_tokens).
//  - Tail: the final block's tokens after the response (past the stop token, or past
//    max_new_tokens) were decoded too, and may have been unmasked before some response tokens of
//    that block, i.e. been context for their draws. They are kept apart in tail_ids / tail_steps /
//    tail_logprobs, so prompt_ids + response_ids + tail_ids is exactly the sequence up to the end
//    of its final block on the grid (its length a multiple of the block size), from which every
//    draw's context can be rebuilt with the step maps. The tail is no part of the response.
//  - Randomness is counter-based: the noise of a draw depends only on (seed, sequence id, the
//    sequence's denoising step, position in block), so a sequence gets the same tokens whatever
//    else is in the batch (up to floating-point differences of the model in other batch shapes).
//  - Step map: for every response token, the sequence's global denoising-step index (0-based,
//    counting only denoising forwards, not commits) at which it was unmasked; non-decreasing from
//    block to block.
//  - Memory: one KV cache of max_batch x max_len, allocated on first use and reused by later
//    calls; release() frees it. A request that cannot fit is a dice::Error, not an OOM.
//  - Prompts beyond max_batch wait and join the batch as others finish (continuous batching);
//    finished rows leave the batch at the next check (every `check_every` forwards).
//  - cuda_graphs: every decode step gets a fixed shape: rows rounded up to a bucket (padding
//    rows are inert: inactive, free cache rows, mask tokens at position 0), the key span rounded
//    up to a multiple of graph_span_step (keys past a row's block are masked), always with a
//    mask. The decode state lives in fixed buffers of all cache rows between admissions and
//    retirements. On a GPU each (rows, span, commit-only) shape is captured once as one CUDA
//    graph of the whole step (forward, draw, unmasking, block bookkeeping: one launch) and
//    replayed; weights updated in place (load_weights) keep the graphs
//    valid. cuda_graphs is ignored on the CPU; fixed_shapes runs the same fixed-shape steps
//    eagerly on any device (how the CPU tests check them).
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dice/model/kv_cache.h"
#include "dice/model/transformer.h"
#include "dice/rollout/unmask.h"
#include "dice/util/error.h"

namespace dice::rollout {

struct SamplerConfig {
  int64_t block_size = 0;  // 0 = the model's block_size
  int64_t steps = 4;       // denoising steps per block
  std::string strategy = "dynamic";
  double threshold = 0.9;  // dynamic: confidence above which a token is unmasked
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  int64_t max_new_tokens = 4096;
  std::vector<int64_t> stop_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
  uint64_t seed = 10086;
  bool record_logprobs = false;
  int64_t max_batch = 32;   // rows decoded together (KV cache rows)
  int64_t max_len = 6144;   // prompt + response tokens per row (KV cache length)
  int64_t check_every = 8;  // forwards between host checks for finished rows
  int64_t prefill_tokens = 32768;  // prompt tokens per prefill forward (bounds activation memory)
  bool time_phases = false;  // synchronise the device around each phase and time it (dice bench)
  bool cuda_graphs = true;  // on a GPU: fixed-shape decode steps, captured as CUDA graphs and replayed
  bool fixed_shapes = false;  // the same fixed-shape steps on any device, without graphs (tests)
  bool fused = true;  // model::ForwardArgs::fused (packed GEMMs, fused kernels) and fused::sample_rows
  int64_t graph_span_step = 128;  // key-span bucket of the fixed shapes
  int64_t max_graphs = 64;        // captured shapes kept (more shapes run eagerly)

  template <class V> void visit(V& v) {
    v("block_size", block_size, "tokens per diffusion block (0 = the model's)");
    v("steps", steps, "denoising steps per block");
    v.choice("strategy", strategy, {"static", "dynamic", "sequential", "low_confidence_static", "low_confidence_dynamic"},
             "unmasking rule");
    v("threshold", threshold, "dynamic: unmask every masked token with confidence above this");
    v("temperature", temperature, "sampling temperature (0 = greedy)");
    v("top_k", top_k, "keep the k most likely tokens (0 = off, 1 = greedy)");
    v("top_p", top_p, "nucleus sampling mass (1 = off)");
    v("max_new_tokens", max_new_tokens, "response length limit");
    v("stop_ids", stop_ids, "token ids that end a sequence");
    v("seed", seed, "base seed; sequence i uses (seed, i)");
    v("record_logprobs", record_logprobs, "record log p of each token when it was unmasked");
    v("max_batch", max_batch, "sequences decoded at once (KV cache rows)");
    v("max_len", max_len, "prompt + response tokens per sequence (KV cache length)");
    v("check_every", check_every, "forwards between checks for finished sequences");
    v("prefill_tokens", prefill_tokens, "prompt tokens per prefill forward");
    v("time_phases", time_phases, "synchronise and time each phase (slower; for profiling)");
    v("cuda_graphs", cuda_graphs, "on a GPU, replay each fixed-shape decode step as a CUDA graph");
    v("fixed_shapes", fixed_shapes, "fixed-shape decode steps without graphs, on any device (for tests)");
    v("fused", fused, "packed GEMMs and fused kernels (norms, RoPE + K/V writes, SiLU, decode attention, sampling)");
    v("graph_span_step", graph_span_step, "key-span bucket of the fixed-shape forwards");
    v("max_graphs", max_graphs, "CUDA graphs kept (other shapes run eagerly)");
  }
  void validate() const;
};

struct SampleRecord {
  int64_t seq_id = 0;
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> response_ids;
  std::vector<int64_t> step_map;  // one per response token
  std::vector<float> logprobs;    // one per response token when record_logprobs
  // The final block's decoded tokens after the response, in position order (see the contract):
  std::vector<int64_t> tail_ids;
  std::vector<int64_t> tail_steps;   // one per tail token: its unmask step (as step_map)
  std::vector<float> tail_logprobs;  // one per tail token when record_logprobs (as logprobs)
  std::string stop_reason;        // "stop_token" | "max_tokens"
  int64_t steps = 0;              // denoising steps the sequence took
  double queued_s = 0;            // from the call's start to joining the batch
  double decode_s = 0;            // from joining the batch (prefill included) to leaving it
};

struct SampleStats {
  int64_t sequences = 0;
  int64_t prompt_tokens = 0;
  int64_t response_tokens = 0;
  int64_t forwards = 0;      // decode forwards (denoise + commit share them)
  int64_t prefills = 0;
  double prefill_s = 0;
  double wall_s = 0;
  // With time_phases (device synchronised at each boundary, so they add up to about wall_s):
  double model_s = 0;   // decode forwards of the model (lm_head included)
  double draw_s = 0;    // noise, sampling and the unmasking rule
  double commit_s = 0;  // block bookkeeping after each forward (commit, stop checks, next block)
  double retire_s = 0;  // host checks, finished rows out, compaction of the cache
  int64_t graphs_captured = 0;  // cuda_graphs: shapes captured during this call
  int64_t graph_replays = 0;    // decode forwards that replayed a graph
  double tokens_per_s() const { return wall_s > 0 ? response_tokens / wall_s : 0; }
};

// Fixed-shape buckets (cuda_graphs): rows -> 1, 2, 4, 8, 16, then multiples of 16, at most
// max_rows; key span -> a multiple of step, at most max_len.
int64_t graph_rows(int64_t n, int64_t max_rows);
int64_t graph_span(int64_t span, int64_t step, int64_t max_len);

class Sampler {
 public:
  Sampler(model::Transformer model, SamplerConfig cfg);
  ~Sampler();

  const SamplerConfig& config() const { return cfg_; }
  int64_t block_size() const { return block_; }

  // Called from generate()'s thread with (prompt index, record) as soon as a sequence's record is
  // final, e.g. to hand it to the judge while the rest are still decoding.
  using RecordFn = std::function<void(int64_t index, const SampleRecord& record)>;
  void set_on_record(RecordFn fn) { on_record_ = std::move(fn); }

  // Generates one response per prompt; sequence i gets id first_seq_id + i (its noise stream).
  // `progress(done, total)` is called from this thread as sequences finish.
  std::vector<SampleRecord> generate(const std::vector<std::vector<int64_t>>& prompts, uint64_t first_seq_id = 0,
                                     const std::function<void(int64_t, int64_t)>& progress = nullptr);
  const SampleStats& last_stats() const { return stats_; }

  // Bytes the KV cache takes (allocated or not).
  int64_t cache_bytes() const;
  // Frees the KV cache and decode buffers (e.g. between rollout and training phases).
  void release();
  // The temperature of the next generate() calls (an RL stage's own); recorded CUDA graphs that drew
  // at another one are dropped.
  void set_temperature(double temperature);

 private:
  struct Impl;
  model::Transformer model_;
  SamplerConfig cfg_;
  int64_t block_ = 4;
  std::unique_ptr<Impl> impl_;
  SampleStats stats_;
  RecordFn on_record_;
};

// Sets a sampler's record callback for one scope: reset on exit, also when generate() throws, so
// the callback never outlives what it captures.
class ScopedRecordFn {
 public:
  ScopedRecordFn(Sampler& s, Sampler::RecordFn fn) : s_(s) { s_.set_on_record(std::move(fn)); }
  ~ScopedRecordFn() { s_.set_on_record(nullptr); }
  ScopedRecordFn(const ScopedRecordFn&) = delete;
  ScopedRecordFn& operator=(const ScopedRecordFn&) = delete;

 private:
  Sampler& s_;
};

}  // namespace dice::rollout
