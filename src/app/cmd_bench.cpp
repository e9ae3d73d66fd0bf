// `dice bench`: the performance suites (module src/bench; run them on the GPU node).
#include "dice/bench/bench.h"
#include "subcommand.h"

namespace dice::app {
namespace {
void setup_bench(CLI::App& cmd) {
  cmd.require_subcommand(1);
  for (auto& s : bench::suites()) s.setup(*cmd.add_subcommand(s.name, s.description));
}
}  // namespace

DICE_SUBCOMMAND("bench", "performance suite (tokenizer, sample, judge, ...): prints ratios to peers", setup_bench);

}  // namespace dice::app
