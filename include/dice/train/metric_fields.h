#pragma once
// Every top-level field of a metrics.jsonl record (`dice train` and `dice sft`), with what it means:
// the one list that writers are checked against (MetricsLog::write), so that a misspelt name is an
// error in the tests instead of a metric dropped in silence. Nested objects (failures, checksums)
// are free below their top-level name.
#include <string>
#include <vector>

namespace dice::train {

struct MetricField {
  const char* name;
  const char* help;
};

const std::vector<MetricField>& metric_fields();
bool is_metric_field(const std::string& name);

// Throws dice::Error naming the first field of `keys` that is not in metric_fields().
void check_metric_fields(const std::vector<std::string>& keys);

}  // namespace dice::train
