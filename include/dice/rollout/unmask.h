#pragma once
// The per-step core of block-diffusion decoding, as pure tensor functions (no model):
// counter-based noise, token drawing (temperature / top-k / top-p / greedy), the transfer
// schedule, the choice of positions to unmask (static / dynamic / sequential) and the block state
// update that records the step map.
//
// Shapes: B = rows (sequences) of the batch, W = block width (block_size), V = vocabulary.
// All functions run on the tensors' device and never read values back to the host.
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace dice::rollout {

enum class Strategy { kStatic, kDynamic, kSequential };
// "static" | "dynamic" | "sequential" (also "low_confidence_static" / "low_confidence_dynamic").
Strategy parse_strategy(const std::string& name);
const char* strategy_name(Strategy s);

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off; 1 = greedy
  double top_p = 1.0;        // 1 = off
  bool fused = false;        // plain sampling (no top-k / top-p) through model::fused::sample_rows
  bool greedy() const { return temperature <= 0.0 || top_k == 1; }
};

// Counter-based uniform noise in (0, 1), a pure function of its four keys: the same
// (seed, sequence id, step, slot) gives the same number on any device, in any batch.
// `step` is the sequence's global denoising-step index, `slot` the position inside the block.
double uniform_noise(uint64_t seed, uint64_t seq_id, uint64_t step, uint64_t slot);
// The same numbers for a batch, computed on the device of seq_id_B:
//   seq_id_B, step_B int64 [B] (non-negative, < 2^32 used) -> double [B, W].
torch::Tensor uniform_noise(uint64_t seed, const torch::Tensor& seq_id_B, const torch::Tensor& step_B, int64_t W);

// One draw per position.
struct Draw {
  torch::Tensor tokens;      // int64 [B, W]
  torch::Tensor confidence;  // float [B, W]: probability of the drawn token under the sampling
                             // distribution (tempered, top-k / top-p filtered); for greedy, its
                             // probability under softmax(logits / T) (T = temperature, or 1 if 0)
  torch::Tensor logprob;     // float [B, W]: log softmax(logits / T)[token] (T as above; top-k / top-p
                             // filtering left out): what the learner scores at the same temperature;
                             // undefined unless asked for
};

// logits_BWV: [B, W, V] any float dtype; uniform_BW: double [B, W] from uniform_noise.
// Sampling is by inverse CDF over the (filtered) distribution with the given uniform, so it is
// deterministic given the noise and independent of the other rows.
Draw draw_tokens(const torch::Tensor& logits_BWV, const torch::Tensor& uniform_BW, const SamplingParams& p,
                 bool want_logprob);

// The transfer schedule: `n_masked` masked tokens of a block unmasked over `steps` steps; step j
// (0-based) transfers n_masked / steps tokens, plus one for the first n_masked % steps steps.
// Steps at or beyond `steps` transfer everything left.
int64_t transfer_count(int64_t n_masked, int64_t step, int64_t steps);
// Element-wise over int64 [B] tensors.
torch::Tensor transfer_count(const torch::Tensor& n_masked_B, const torch::Tensor& step_B, int64_t steps);

// Positions to unmask this step, bool [B, W] (a subset of masked_BW):
//   static:     the k most confident masked positions (ties: leftmost first);
//   dynamic:    every masked position with confidence > threshold, or the k most confident when
//               fewer than k pass;
//   sequential: the k leftmost masked positions.
// k_B int64 [B] is clamped to [1, masked count] for rows that still have masks, so every row
// with masks makes progress.
torch::Tensor select_unmask(const torch::Tensor& confidence_BW, const torch::Tensor& masked_BW,
                            const torch::Tensor& k_B, Strategy strategy, double threshold);

// The state of the current block of every row.
struct BlockState {
  torch::Tensor tokens;         // int64 [B, W]: mask id where still masked
  torch::Tensor masked;         // bool [B, W]
  torch::Tensor n_masked_init;  // int64 [B]: masks at the block's start (the schedule's total)
  torch::Tensor step_in_block;  // int64 [B]: denoising steps taken in this block
  torch::Tensor global_step;    // int64 [B]: denoising steps taken by the sequence so far
  torch::Tensor unmask_step;    // int64 [B, W]: global step at which the position was unmasked, -1 if not
  torch::Tensor logprob;        // float [B, W]: log-prob of the token when unmasked (0 if not)

  // B rows of width W, every position masked, counters at 0.
  static BlockState empty(int64_t B, int64_t W, int64_t mask_id, torch::Device device);
};

// One denoising step for the rows in `active_B` (bool [B]) that still have masks: draw (already
// done, `d`), choose positions, write them. Unmasked tokens never change; rows without masks or
// inactive rows are left untouched (their counters too). Returns the chosen positions, bool [B, W].
torch::Tensor apply_step(BlockState& st, const Draw& d, const torch::Tensor& active_B, int64_t steps,
                         Strategy strategy, double threshold);

}  // namespace dice::rollout
