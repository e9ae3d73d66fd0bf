// Sampling items in runs of consecutive noise streams: see sample_runs.h.
#include "dice/train/sample_runs.h"

namespace dice::train {

std::vector<rollout::SampleRecord> sample_runs(
    rollout::Sampler& sampler, const std::vector<SampleItem>& items,
    const std::function<void(size_t item, const rollout::SampleRecord& record)>& on_sampled) {
  std::vector<rollout::SampleRecord> out(items.size());
  size_t first = 0;  // the running generate() call's first item
  rollout::ScopedRecordFn hook(sampler, !on_sampled ? rollout::Sampler::RecordFn() :
      [&](int64_t index, const rollout::SampleRecord& rec) { on_sampled(first + static_cast<size_t>(index), rec); });
  for (size_t i = 0; i < items.size();) {
    if (items[i].prompt == nullptr) { ++i; continue; }
    size_t j = i + 1;
    while (j < items.size() && items[j].prompt != nullptr && items[j].stream == items[j - 1].stream + 1) ++j;
    std::vector<std::vector<int64_t>> prompts;
    prompts.reserve(j - i);
    for (size_t k = i; k < j; ++k) prompts.push_back(*items[k].prompt);
    first = i;
    auto recs = sampler.generate(prompts, items[i].stream);
    for (size_t k = i; k < j; ++k) out[k] = std::move(recs[k - i]);
    i = j;
  }
  return out;
}

}  // namespace dice::train
