#pragma once
// `dice sft`: supervised fine-tuning with SDAR's block-diffusion objective (recipe §2.3, §3.3), the
// stage before BiC-RL (CuKe SFT). Every rank is a data-parallel learner.
//
//   model: models/sdar-1.7b-chat     # HF folder or checkpoint (step_N/) to start from
//   out: runs/sft
//   data: {path: cuke.json, format: auto, think_prefix: true, max_tokens: 6144}
//   epochs: 3
//   optim: {lr: 1.0e-5, warmup_ratio: 0.03, examples_per_step: 16, micro_batch_tokens: 16384}
//   ckpt: {every: 200, keep_last: 3}
//
// Data (data.format):
//   pairs: a JSON array or JSONL of {prompt, response} (CuKe's columns), or alpaca's
//          {instruction, input, output} (prompt = instruction, then a blank line and input when set);
//   tasks: a task JSONL whose tasks carry a `solution`: prompt = the task's end-to-end prompt (as
//          `dice train` renders it), response = the solution in a ```python block;
//   auto:  tasks when the first record has `reference`, else pairs.
// An example is <|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n (the prompt, never
// masked, no loss), then the response: [<think>\n\n</think>\n\n when think_prefix] {response}
// <|im_end|>, padded with <|endoftext|> to a multiple of the block size (labels: all of it).
// Examples longer than data.max_tokens are dropped and counted.
//
// A step: examples_per_step examples of the epoch's permutation (fixed by seed and epoch; the last
// step of an epoch takes what is left), spread round-robin over the ranks, packed into rows of at
// most pack_tokens (examples isolated from each other by the mask), rows into micro-batches of at
// most micro_batch_tokens. Each example's noise is a function of (seed, epoch, example) alone: one
// t ~ U(0,1), mask probability p = (1 - eps) t + eps, each response token masked with probability
// p (redrawn up to 10 times while none is, then one forced). The model sees [noisy | clean] under
// model::sft_mask's rule (the learner's block-sparse attention by default; the noisy copy starts at
// the block of the first response token); the loss is sum over masked tokens of CE / p, divided by
// the label tokens of the whole step (all ranks), so neither the rank count nor the packing changes
// the update (up to the order of floating-point sums). The learning rate warms up linearly over the first
// ceil(warmup_ratio * total steps) steps (step k of w gets lr * k / w), then stays constant.
//
// Metrics (metrics.jsonl, one record per step): loss, ce_masked (mean CE over masked tokens, the
// figure that shows learning), masked/label tokens, lr, grad_norm, throughput, times. Checkpoints
// are the trainer's format (stage "sft"); --resume auto continues bit for bit. See docs/sft.md.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/dist/world.h"
#include "dice/model/masks.h"
#include "dice/model/transformer.h"
#include "dice/rl/trace.h"
#include "dice/train/rl_config.h"
#include "dice/text/tokenizer.h"

namespace dice::train {

struct SftDataConfig {
  std::string path;
  std::string format = "auto";
  std::string prompt_template;  // tasks: "" = configs/prompts end-to-end default for each task's device
  bool think_prefix = true;     // LLaMA-Factory's qwen3 template, as DICE trained: an empty think block first
  int64_t max_tokens = 6144;    // cutoff_len: longer examples are dropped
  // tasks format: which prompts each task gives (end_to_end, infill: the same answer, a whole file),
  // its wrong twins as examples too, and the first max_tasks tasks only (0 = all)
  std::vector<std::string> prompt_kinds{"end_to_end"};
  std::string infill_template;  // "" = the built-in infill template per device
  std::string answer = "file";  // infill prompts' answer: file (whole file, fenced) | middle (the gap, as is)
  bool wrong_solutions = false;
  int64_t max_tasks = 0;

  template <class V> void visit(V& v) {
    v("path", path, "SFT data: JSON / JSONL of {prompt, response} (or alpaca), or a task JSONL with solutions");
    v.choice("format", format, {"auto", "pairs", "tasks"}, "how to read data.path");
    v("prompt_template", prompt_template, "tasks format: prompt template file (default: end-to-end per device)");
    v("think_prefix", think_prefix, "start every response with an empty <think></think> block (DICE's SFT)");
    v("max_tokens", max_tokens, "examples longer than this many tokens (prompt + response) are dropped");
    v("prompt_kinds", prompt_kinds, "tasks format: one example per task and kind: end_to_end and/or infill");
    v("infill_template", infill_template, "tasks format: infill prompt template file (default: per device)");
    v.choice("answer", answer, {"file", "middle"},
             "tasks format: what an infill prompt's answer is: file (the whole file in a code block, DICE) or "
             "middle (only the code between prefix and suffix, as written)");
    v("wrong_solutions", wrong_solutions,
      "tasks format: each task's wrong twins (wrong_solutions) are examples too, beside its solution");
    v("max_tasks", max_tasks, "tasks format: the first this many tasks (0 = all)");
  }
};

struct SftOptimConfig {
  double lr = 1e-5;
  double warmup_ratio = 0.03;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;
  int64_t examples_per_step = 16;      // over all ranks
  int64_t micro_batch_tokens = 16384;  // padded tokens of one copy (the model sees twice as many)
  int64_t pack_tokens = 0;             // 0: data.max_tokens
  std::string compute_dtype = "auto";
  bool fast = true;             // block-sparse attention and chunked log-probs (false: dense [2n, 2n] mask)
  int64_t attn_chunk = 256;     // fast: clean tokens per attention chunk
  int64_t logit_chunk = 2048;   // fast: targets per lm_head + log-softmax chunk
  int64_t checkpoint_layers = 0;
  bool zero1 = false;           // shard the AdamW state over ranks

  template <class V> void visit(V& v) {
    v("lr", lr, "AdamW learning rate after warmup");
    v("warmup_ratio", warmup_ratio, "fraction of the total steps with a linear warmup");
    v("beta1", beta1, "AdamW beta1");
    v("beta2", beta2, "AdamW beta2");
    v("eps", eps, "AdamW epsilon");
    v("weight_decay", weight_decay, "AdamW decoupled weight decay");
    v("grad_clip", grad_clip, "global gradient-norm clip (<= 0: off)");
    v("examples_per_step", examples_per_step, "examples per optimizer step, over all ranks");
    v("micro_batch_tokens", micro_batch_tokens, "padded row tokens (one copy) per forward/backward");
    v("pack_tokens", pack_tokens, "longest packed row (0: data.max_tokens)");
    v.choice("compute_dtype", compute_dtype, {"auto", "float32", "bfloat16"},
             "forward/backward dtype (fp32 master weights, gradients and AdamW); auto: bf16 on CUDA");
    v("fast", fast, "block-sparse attention and chunked log-probs, as the RL learner (false: a dense mask)");
    v("attn_chunk", attn_chunk, "fast: clean tokens per block-sparse attention chunk");
    v("logit_chunk", logit_chunk, "fast: masked tokens per chunk of lm_head + log-softmax");
    v("checkpoint_layers", checkpoint_layers,
      "fast: activation checkpointing of this many layers from the first (-1: all)");
    v("zero1", zero1, "shard the AdamW state over ranks (ZeRO-1): each updates the parameters it owns");
  }
  void validate() const;
  rl::ScoreOptions scoring() const;
};

// dist and ckpt: the keys `dice train` has for the same knobs (dist.timeout_s, dist.bucket_mb,
// ckpt.every, ckpt.keep_last).
struct SftDistConfig {
  double timeout_s = 600;
  int64_t bucket_mb = 64;

  template <class V> void visit(V& v) {
    v("timeout_s", timeout_s, "a collective waiting longer than this aborts the job");
    v("bucket_mb", bucket_mb, "ZeRO-1: bucket size of the parameter broadcast after each update");
  }
};

struct SftCkptConfig {
  int64_t every = 200;
  int keep_last = 3;

  template <class V> void visit(V& v) {
    v("every", every, "checkpoint every K steps (and after the last)");
    v("keep_last", keep_last, "keep the newest K checkpoints (0: all)");
  }
};

struct SftRunConfig {
  std::string model;
  std::string out = "runs/sft";
  std::string device = "auto";
  SftDataConfig data;
  int64_t epochs = 3;
  int64_t max_steps = 0;  // > 0: stop after this step (the schedule still counts every epoch)
  uint64_t seed = 0;
  double noise_eps = 1e-3;
  SftOptimConfig optim;
  SftDistConfig dist;
  SftCkptConfig ckpt;
  FaultConfig fault;

  template <class V> void visit(V& v) {
    v("model", model, "HF folder or checkpoint to start from");
    v("out", out, "run directory (checkpoints, metrics.jsonl)");
    v.choice("device", device, {"auto", "cpu", "cuda"}, "model device");
    v("data", data, "training examples");
    v("epochs", epochs, "passes over the data");
    v("max_steps", max_steps, "stop after this step (0: run every epoch); the schedule is unchanged");
    v("seed", seed, "data order and noise");
    v("noise_eps", noise_eps, "smallest mask probability: p = (1 - eps) t + eps");
    v("optim", optim, "optimizer");
    v("dist", dist, "collectives");
    v("ckpt", ckpt, "checkpoints");
    v("fault", fault, "fault injection (tests)");
  }
  void validate() const;
};

// Keys whose change does not change results (a resume may differ from the recorded config there).
bool sft_key_affects_results(const std::string& dotted_key);

// ---- the pieces (tested on their own) ----

struct SftText {
  std::string prompt, response;
};
// The examples of cfg.path as text (see the format rules above); a dice::Error names the file and
// the record for anything malformed.
std::vector<SftText> read_sft_texts(const SftDataConfig& cfg);

struct SftExample {
  std::vector<int32_t> ids;  // prompt then response, padded to a multiple of the block size
  int64_t prompt_len = 0;    // ids[prompt_len:] are the labels
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
};
SftExample encode_sft_example(const SftText& t, const text::Tokenizer& tok, int64_t block_size, bool think_prefix);

// Next-fit packing of examples (their lengths, in order) into rows of at most row_tokens.
std::vector<std::vector<int64_t>> pack_rows(const std::vector<int64_t>& lengths, int64_t row_tokens);

// The examples of an epoch in training order: a permutation fixed by (seed, epoch).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// Which response tokens of an example are masked, and with what probability.
struct SftNoise {
  std::vector<uint8_t> masked;  // per response token (size - prompt_len)
  double p = 1;
};
SftNoise sft_noise(int64_t response_len, double eps, uint64_t seed, int64_t epoch, int64_t example);

// Rows of noised examples, on `device`: ids [B, T] = [noisy | clean], positions [B, T], the
// attention pattern, and the loss terms: flat indices into B * T of the masked noisy tokens,
// their clean token ids and weights 1 / p. The clean part holds every token; the noisy part only
// the blocks from the one holding an example's first response token (an all-prompt block's noisy
// copy feeds no target, so leaving it out changes nothing but the work). The pattern is
// model::sft_mask's rule over this layout: so.fast, the block-sparse plan (each example's blocks
// numbered from its offset in the row, so that a chunk holds one example); else the dense mask
// [B, 1, T, T].
struct SftBatch {
  torch::Tensor ids, positions, mask, target_at, targets, weights;
  std::shared_ptr<model::SparseAttention> sparse;
  int64_t rows = 0, row_tokens = 0;  // B, T
};
SftBatch make_sft_batch(const std::vector<std::vector<const SftExample*>>& rows,
                        const std::vector<std::vector<const SftNoise*>>& noise, int64_t block_size, int64_t pad_id,
                        int64_t mask_id, torch::Device device, const rl::ScoreOptions& so = {});
// sum(CE * w) over the batch's targets (divided by the caller), and the plain CE sum (metrics).
struct SftLoss {
  torch::Tensor weighted_sum;
  double ce_sum = 0;
};
SftLoss sft_loss(model::Transformer& m, const SftBatch& b, const rl::ScoreOptions& so = {});

struct SftResult {
  int64_t first_step = 1, last_step = 0, total_steps = 0;
  std::vector<double> ce_masked;  // per step run here (rank 0)
  std::string last_checkpoint;
};
// `resume`: auto | never | a checkpoint directory (as `dice train`).
SftResult run_sft(const SftRunConfig& cfg, const std::string& resume, const std::string& resolved_yaml,
                  const dist::World& world);

}  // namespace dice::train
