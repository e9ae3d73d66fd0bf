#pragma once
// TraceRL rows (recipe §4.6) on the sampler's block grid.
//
// One grid for sampler and learner: blocks of block_size aligned to absolute position 0. The
// prompt's full blocks are block-causal context; its last P % W tokens share the first decode
// block with the first response tokens (fixed, never targets), exactly as the sampler decodes
// them. A trajectory is prompt + response + tail (the rest of the final decoded block, which the
// sampler reports separately), so it always ends on a block boundary.
//
// Rounds: in every decode block, the distinct unmask steps of its generated positions in order
// (with `shrink` s, every s consecutive distinct steps form one round). In round k the block's
// targets are the response tokens whose step lies in the round; its noisy copy shows the tokens
// unmasked before the round's first step and the mask token everywhere else — the block the model
// saw when it drew those tokens. Each noisy copy attends the clean blocks before it and itself.
//
// Layouts (both give the same per-token log-probs):
//  - "packed": one row per trajectory: [clean sequence | one W-token noisy copy per (block,
//    round) that has targets]. Logits only at target positions.
//  - "reference": one row per round k: [clean sequence | a noisy copy of every decode block
//    masked for round k]; rows without targets are dropped (DICE's layout, on the shared grid).
//
// Shape legend: B rows, T row tokens, N targets.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/model/transformer.h"

namespace dice::rl {

struct Trajectory {
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> response_ids;
  std::vector<int64_t> step_map;     // one per response token: its unmask step
  std::vector<int64_t> tail_ids;     // the final block's tokens after the response
  std::vector<int64_t> tail_steps;
  double advantage = 0;
};

struct TraceOptions {
  int64_t block_size = 4;
  int64_t mask_token_id = 151669;
  int64_t shrink = 1;
  std::string layout = "packed";  // packed | reference
};

// One row before batching; `target_*` index its targets.
struct TraceRow {
  std::vector<int64_t> ids, positions, block, copy;
  std::vector<uint8_t> noisy;
  std::vector<int64_t> target_pos;    // index into the row
  std::vector<int64_t> target_token;  // the token the sampler produced there
  std::vector<int64_t> target_resp;   // index of that token within its response
  int64_t trajectory = 0;             // which trajectory of the caller's list
};

// Rows of one trajectory (index `trajectory` in the caller's list). Throws a dice::Error when the
// step map does not fit the tokens.
std::vector<TraceRow> trace_rows(const Trajectory& t, const TraceOptions& opts, int64_t trajectory = 0);

// How the learner scores rows. The plain path (fast = false) is the definition: one dense
// [B, 1, T, T] mask, lm_head at the targets and log_softmax over the whole [N, vocab] fp32 logits.
// The fast path computes the same numbers without those N x N / N x vocab tensors: attention by
// a block-sparse plan (model::block_diffusion_plan, chunks of `attn_chunk` clean tokens) and
// log-probs from the final hidden states `logit_chunk` targets at a time (logits recomputed in
// backward, never all held at once); optionally the first `checkpoint` layers (< 0: all) are
// checkpointed. With `fused` the fast path's forward is ForwardArgs::train_fused (packed q|k|v and
// gate|up GEMMs; RMSNorm, q/k norm + RoPE and SiLU * up as fused operators with a backward on
// CUDA bf16, the same composite ops elsewhere). `temperature`: log-probs of softmax(logits / T), the
// distribution a sampler at temperature T draws from (RL stages that sample below 1 stay on-policy).
struct ScoreOptions {
  double temperature = 1.0;
  bool fast = true;
  bool fused = true;
  int64_t attn_chunk = 256;
  int64_t logit_chunk = 2048;
  int64_t checkpoint = 0;
};

// Rows padded to one length, ready for model::Transformer::forward with logits_at = target_flat.
// The dense mask is built for the plain path, the sparse plan for the fast one.
inline ScoreOptions plain_scoring() {
  ScoreOptions o;
  o.fast = false;
  return o;
}

struct TraceBatch {
  torch::Tensor ids_BT, positions_BT, mask_B1TT;
  std::shared_ptr<model::SparseAttention> sparse;
  torch::Tensor target_flat_N;   // int64: row * T + position
  torch::Tensor target_token_N;  // int64
  torch::Tensor target_traj_N;   // int64: trajectory index
  torch::Tensor target_resp_N;   // int64: index within the response
  int64_t rows = 0, row_tokens = 0;
};
TraceBatch collate(const std::vector<TraceRow>& rows, torch::Device device, const ScoreOptions& opts = plain_scoring());

// log pi(target token | its noisy copy) at every target of the batch: float32 [N] (with autograd
// unless under NoGradGuard). lm_head runs only at the targets.
torch::Tensor token_logprobs(model::Transformer& model, const TraceBatch& batch, const ScoreOptions& opts = plain_scoring());

// log_softmax(h_NH @ w_VH^T / temperature)[n, token_N[n]] in fp32 (the logits rounded to w's dtype
// first, as lm_head's output, then divided in fp32 as the sampler does), `chunk` rows at a time;
// backward recomputes each chunk's logits.
torch::Tensor chunked_token_logprobs(const torch::Tensor& h_NH, const torch::Tensor& w_VH, const torch::Tensor& token_N,
                                     int64_t chunk, double temperature = 1.0);

// Number of tokens a batch of these rows takes (rows x padded length).
int64_t padded_tokens(const std::vector<const TraceRow*>& rows);

}  // namespace dice::rl
