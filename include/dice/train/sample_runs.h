#pragma once
// The sampling half of every sample -> judge path (the RL actor's step, its in-training eval and
// `dice eval`): items in order, each a prompt and its noise stream; runs of consecutive items
// whose streams are consecutive share one Sampler::generate() call, and `on_sampled` sees each
// sequence the moment it is decoded (the callers hand it to a judge::JudgeQueue there, so the
// judge's builds run on the CPUs while the GPU samples). An item without a prompt (too long for
// the cache, say) is not sampled and breaks a run: item i is always sampled with stream i's noise,
// whatever else is in the batch.
#include <cstdint>
#include <functional>
#include <vector>

#include "dice/rollout/sampler.h"

namespace dice::train {

struct SampleItem {
  const std::vector<int64_t>* prompt = nullptr;  // chat-framed ids; nullptr: not sampled
  uint64_t stream = 0;                            // the sampler's noise stream (sequence id)
};

// Returns the records by item (a default record for an item not sampled). `on_sampled(i, record)`
// (optional) runs on generate()'s thread, before generate() returns.
std::vector<rollout::SampleRecord> sample_runs(
    rollout::Sampler& sampler, const std::vector<SampleItem>& items,
    const std::function<void(size_t item, const rollout::SampleRecord& record)>& on_sampled = nullptr);

}  // namespace dice::train
