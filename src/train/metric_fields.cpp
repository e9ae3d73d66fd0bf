#include "dice/train/metric_fields.h"

#include <algorithm>

#include "dice/util/error.h"

namespace dice::train {

const std::vector<MetricField>& metric_fields() {
  static const std::vector<MetricField> fields = {
      // every record
      {"step", "the step this record is about (1 = the first)"},
      {"time", "Unix seconds when the record was written"},
      {"elapsed_s", "the run's seconds so far, counted on across resumes"},
      {"checkpoint", "the checkpoint folder written at this step"},
      // RL (dice train): the step
      {"stage", "the BiC-RL stage's name"},
      {"policy_version", "the policy's version the actors sampled with"},
      {"samples", "responses sampled"},
      {"groups", "prompt groups"},
      {"kept_samples", "responses that carry an advantage into the update"},
      {"zero_variance_groups", "groups whose rewards were all equal (no signal)"},
      {"too_long_groups", "groups dropped because a response hit the length limit"},
      {"reward_mean", "mean reward of the step's responses"},
      {"reward_std", "standard deviation of those rewards"},
      {"advantage_min", "smallest advantage of a kept response"},
      {"advantage_max", "largest advantage of a kept response"},
      {"advantage_mean", "mean advantage of the kept responses"},
      {"response_tokens", "tokens the actors sampled"},
      // RL: the judge
      {"judged", "responses the judge gave a verdict"},
      {"compiled", "of them, compiled"},
      {"correct", "of them, correct"},
      {"extracted", "of them, a code block was found in"},
      {"static_findings", "static-check findings over the step's candidates"},
      {"judge_cache_hits", "builds served from the judge's cache"},
      {"judge_reused", "verdicts reused from identical candidates judged before (judge.reuse_verdicts)"},
      {"judge_batches", "judge submissions"},
      {"judge_queue_max", "the judge queue's largest length"},
      {"pass_rate", "correct / judged"},
      {"compile_rate", "compiled / judged"},
      {"eval_samples", "eval.every: samples of the policy's evaluation after this step"},
      {"eval_pass_rate", "eval.every: correct / evaluation samples"},
      {"eval_compile_rate", "eval.every: compiled / evaluation samples"},
      {"eval_fast_1", "eval.every: correct and faster than the reference / evaluation samples (needs judge.timing)"},
      {"eval_failures", "eval.every: evaluation samples per failure class (none = correct)"},
      {"judge_compile_p50_s", "median build seconds per candidate"},
      {"judge_compile_p90_s", "90th-percentile build seconds"},
      {"judge_exec_p50_s", "median execution seconds per candidate"},
      {"judge_exec_p90_s", "90th-percentile execution seconds"},
      {"judge_latency_p50_s", "median seconds from a finished response to its verdict"},
      {"judge_latency_p90_s", "90th-percentile of that latency"},
      {"failures", "verdicts by failure class (an object)"},
      // RL: the update
      {"loss", "training loss (RL: the TraceRL objective; SFT: summed over the step)"},
      {"policy_loss", "the policy-gradient part of the loss"},
      {"kl", "KL estimate against the old policy"},
      {"clip_fraction", "share of tokens whose ratio was clipped"},
      {"grad_norm", "gradient norm before clipping"},
      {"updates", "optimizer updates in the step"},
      {"target_tokens", "tokens the loss was taken over"},
      {"row_tokens", "tokens in the training rows"},
      {"padded_response_len", "response length the rows were padded to"},
      {"logp_gap_mean", "mean |log p(learner) - log p(actor)| of the sampled tokens"},
      {"logp_gap_max", "largest such gap"},
      {"weight_sync_bytes", "bytes of weights sent to the actors"},
      {"weight_sync_gbps", "their rate, GB/s"},
      {"sample_tokens_per_s", "response tokens sampled per second"},
      {"learner_row_tokens_per_s", "row tokens the learner processed per second"},
      {"checksums", "weight checksums of learners and actors (an object)"},
      // RL: where the step's time went
      {"time_step_s", "seconds of the whole step"},
      {"time_sample_s", "seconds sampling"},
      {"time_judge_s", "seconds waiting for verdicts after sampling"},
      {"time_advantage_s", "seconds computing advantages"},
      {"time_transfer_s", "seconds sending rollouts to the learners"},
      {"time_rows_s", "seconds building training rows"},
      {"time_old_logp_s", "seconds of the old policy's log-probabilities"},
      {"time_update_s", "seconds of the update"},
      {"time_weight_sync_s", "seconds sending weights to the actors"},
      {"time_checkpoint_s", "seconds writing the checkpoint"},
      {"time_eval_s", "eval.every: seconds sampling and judging the evaluation"},
      // SFT (dice sft)
      {"epoch", "the epoch the step is in (1 = the first)"},
      {"examples", "examples in the step"},
      {"ce_masked", "cross-entropy per masked label token"},
      {"masked_tokens", "label tokens masked (what the loss is over)"},
      {"label_tokens", "label tokens in the step"},
      {"lr", "learning rate"},
      {"tokens_per_s", "row tokens per second"},
  };
  return fields;
}

bool is_metric_field(const std::string& name) {
  const auto& f = metric_fields();
  return std::any_of(f.begin(), f.end(), [&](const MetricField& m) { return name == m.name; });
}

void check_metric_fields(const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    DICE_REQUIRE(is_metric_field(k), "metrics: '", k,
                 "' is not a metrics field (include/dice/train/metric_fields.h lists them; a new metric is added "
                 "there, a misspelt one would be lost)");
}

}  // namespace dice::train
