// ckpt/checkpoint: directory layout, commit protocol, discovery, keep-last-K, state/optim round trips.
#include "dice/ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt_test_util.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::ckpt {
namespace {

namespace stdfs = std::filesystem;
using testing::TempDir;

TrainState sample_state(int64_t step) {
  TrainState st;
  st.step = step;
  st.stage = "infill";
  st.cursor = 1234;
  st.policy_version = step + 1;
  st.rng[0] = std::string("\x00\x01\x02rng-zero", 11);
  st.rng[3] = std::string(300, '\xab');
  st.metrics_json = R"({"reward":0.5,"kl":0.01})";
  st.config_yaml = "train:\n  lr: 1.0e-06\n  steps: 100\n";
  return st;
}

OptimState sample_optim(uint64_t seed, int64_t step) {
  torch::manual_seed(seed);
  OptimState o;
  o.step = step;
  o.m["model.layers.0.mlp.up_proj.weight"] = torch::randn({4, 8});
  o.m["lm_head.weight"] = torch::randn({16, 8});
  o.v["model.layers.0.mlp.up_proj.weight"] = torch::rand({4, 8});
  o.v["lm_head.weight"] = torch::rand({16, 8});
  return o;
}

std::string save_simple(const std::string& run, int64_t step, int keep_last = 0) {
  return save_checkpoint(run, step, testing::tiny_tensors(step), {{0, sample_optim(step, step)}}, sample_state(step),
                         keep_last);
}

TEST(Checkpoint, StepDirName) {
  EXPECT_EQ(step_dir_name(120), "step_000120");
  EXPECT_EQ(step_dir_name(0), "step_000000");
  EXPECT_EQ(step_dir_name(12345678), "step_12345678");
}

TEST(Checkpoint, SaveLayoutAndRoundTrip) {
  TempDir run;
  NamedTensors model = testing::tiny_tensors(7);
  std::map<int, OptimState> optim{{0, sample_optim(1, 120)}, {1, sample_optim(2, 120)}};
  int barriers = 0;
  std::string dir = save_checkpoint(run.path, 120, model, optim, sample_state(120), 0, [&] { ++barriers; });
  EXPECT_EQ(dir, run / "step_000120");
  EXPECT_EQ(barriers, 1);
  for (const char* f : {"model.h5", "state.h5", "optim_rank0.h5", "optim_rank1.h5", "COMPLETE"})
    EXPECT_TRUE(stdfs::exists(stdfs::path(dir) / f)) << f;
  EXPECT_FALSE(stdfs::exists(run / "step_000120.tmp"));
  EXPECT_NE(fs::read_file(dir + "/COMPLETE").find("\"model.h5\""), std::string::npos);

  testing::expect_bit_exact(model, load_model(dir));
  EXPECT_EQ(list_model_tensors(dir).size(), model.size());

  TrainState want = sample_state(120), got = load_state(dir);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.stage, want.stage);
  EXPECT_EQ(got.cursor, want.cursor);
  EXPECT_EQ(got.policy_version, want.policy_version);
  EXPECT_EQ(got.rng, want.rng);
  EXPECT_EQ(got.metrics_json, want.metrics_json);
  EXPECT_EQ(got.config_yaml, want.config_yaml);

  EXPECT_EQ(optim_ranks(dir), (std::vector<int>{0, 1}));
  for (const auto& [rank, o] : optim) {
    OptimState g = load_optim(dir, rank);
    EXPECT_EQ(g.step, o.step);
    testing::expect_bit_exact(o.m, g.m);
    testing::expect_bit_exact(o.v, g.v);
  }
  try {
    load_optim(dir, 5);
    FAIL() << "missing rank accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("learner rank 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[0, 1]"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(check_checkpoint(dir).empty());
  EXPECT_EQ(find_latest_complete(run.path), dir);
}

TEST(Checkpoint, PerRankProtocolCallsBarrierAndShardsOptimizer) {
  // Two "ranks" in one process: the leader's phases interleave with rank 1 through the barrier.
  TempDir run;
  NamedTensors model = testing::tiny_tensors(3);
  OptimState o0 = sample_optim(10, 5), o1 = sample_optim(11, 5);
  o1.m.erase("lm_head.weight");  // ZeRO-1: rank 1 owns fewer parameters
  o1.v.erase("lm_head.weight");
  SaveOptions r1;
  r1.rank = 1;
  r1.leader = false;
  int phase = 0;
  SaveOptions leader;
  leader.rank = 0;
  leader.copy_files = {run / "config.json", run / "missing.json"};
  fs::write_file(run / "config.json", "{\"model_type\": \"qwen3\"}");
  leader.barrier = [&] {
    // Rank 1 runs its matching phase when the leader reaches each barrier.
    ++phase;
    if (phase == 1) {
      ASSERT_TRUE(stdfs::is_directory(run / "step_000005.tmp"));
      save_checkpoint(run.path, 5, {}, &o1, {}, r1);  // rank 1's barriers are no-ops here
    }
  };
  std::string dir = save_checkpoint(run.path, 5, model, &o0, sample_state(5), leader);
  EXPECT_EQ(phase, 3);
  EXPECT_TRUE(check_checkpoint(dir).empty());
  EXPECT_TRUE(stdfs::exists(dir + "/config.json"));
  EXPECT_FALSE(stdfs::exists(dir + "/missing.json"));
  EXPECT_EQ(load_optim(dir, 1).m.size(), 1u);
  EXPECT_EQ(load_optim(dir, 0).m.size(), 2u);
}

TEST(Checkpoint, NonLeaderWritesOnlyItsOptimizerFile) {
  TempDir run;
  stdfs::create_directories(run / "step_000009.tmp");
  SaveOptions r2;
  r2.rank = 2;
  r2.leader = false;
  OptimState o = sample_optim(3, 9);
  save_checkpoint(run.path, 9, {}, &o, {}, r2);
  EXPECT_TRUE(stdfs::exists(run / "step_000009.tmp/optim_rank2.h5"));
  EXPECT_FALSE(stdfs::exists(run / "step_000009.tmp/model.h5"));
  EXPECT_FALSE(stdfs::exists(run / "step_000009"));
}

TEST(Checkpoint, PartialCheckpointsSkippedByFindLatest) {
  TempDir run;
  std::string good = save_simple(run.path, 10);
  // A newer checkpoint whose COMPLETE marker was never written.
  std::string no_marker = save_simple(run.path, 20);
  stdfs::remove(no_marker + "/COMPLETE");
  // An even newer one still being written.
  save_simple(run.path, 30);
  stdfs::rename(run / "step_000030", run / "step_000030.tmp");
  EXPECT_EQ(find_latest_complete(run.path), good);
  auto reasons = check_checkpoint(no_marker);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("COMPLETE"), std::string::npos);
  EXPECT_FALSE(check_checkpoint(run / "step_000030.tmp").empty());
  EXPECT_EQ(find_latest_complete(run / "no-such-run"), std::nullopt);
}

TEST(Checkpoint, CorruptModelSkippedAndRefusedWithClearMessage) {
  TempDir run;
  std::string good = save_simple(run.path, 1);
  std::string flipped = save_simple(run.path, 2);
  std::string truncated = save_simple(run.path, 3);

  const std::string f2 = flipped + "/model.h5";
  testing::flip_byte(f2, testing::dataset_offset(f2, "lm_head.weight") + 3);
  const std::string f3 = truncated + "/model.h5";
  stdfs::resize_file(f3, stdfs::file_size(f3) * 2 / 3);

  EXPECT_EQ(find_latest_complete(run.path), good);
  // Without checksum verification the flipped checkpoint opens; the truncated one still fails.
  EXPECT_EQ(find_latest_complete(run.path, /*verify=*/false), flipped);

  try {
    load_model(truncated);
    FAIL() << "truncated model.h5 accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("checkpoint " + f3 + " is corrupt or truncated"), std::string::npos) << msg;
  }
  try {
    load_model(flipped);
    FAIL() << "flipped model.h5 accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(f2), std::string::npos) << msg;
    EXPECT_NE(msg.find("'lm_head.weight'"), std::string::npos) << msg;
  }
  bool ok = true;
  EXPECT_NE(describe(flipped, true, &ok).find("FAILED"), std::string::npos);
  EXPECT_FALSE(ok);
  describe(good, true, &ok);
  EXPECT_TRUE(ok);
}

TEST(Checkpoint, FormatVersionMismatchInCompleteMarker) {
  TempDir run;
  std::string dir = save_simple(run.path, 4);
  fs::write_file(dir + "/COMPLETE", R"({"format_version": 99, "step": 4, "files": ["model.h5", "state.h5"]})");
  auto reasons = check_checkpoint(dir);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("format version 99"), std::string::npos) << reasons[0];
  EXPECT_EQ(find_latest_complete(run.path), std::nullopt);
}

TEST(Checkpoint, KeepLastK) {
  TempDir run;
  for (int64_t step : {10, 20, 30}) save_simple(run.path, step);
  stdfs::create_directories(run / "step_000005.tmp");  // debris of an old crash
  save_simple(run.path, 40, /*keep_last=*/2);
  EXPECT_FALSE(stdfs::exists(run / "step_000010"));
  EXPECT_FALSE(stdfs::exists(run / "step_000020"));
  EXPECT_FALSE(stdfs::exists(run / "step_000005.tmp"));
  EXPECT_TRUE(stdfs::exists(run / "step_000030"));
  EXPECT_TRUE(stdfs::exists(run / "step_000040"));
  EXPECT_EQ(find_latest_complete(run.path), run / "step_000040");
  // A partial newer checkpoint does not count toward K and is not deleted.
  save_simple(run.path, 50);
  stdfs::remove(run / "step_000050/COMPLETE");
  auto deleted = prune_checkpoints(run.path, 1);
  EXPECT_EQ(deleted, std::vector<std::string>{run / "step_000030"});
  EXPECT_TRUE(stdfs::exists(run / "step_000040"));
  EXPECT_TRUE(stdfs::exists(run / "step_000050"));
}

TEST(Checkpoint, ResaveSameStepReplaces) {
  TempDir run;
  save_simple(run.path, 8);
  NamedTensors other = testing::tiny_tensors(99);
  std::string dir = save_checkpoint(run.path, 8, other, std::map<int, OptimState>{}, sample_state(8));
  testing::expect_bit_exact(other, load_model(dir));
  EXPECT_TRUE(optim_ranks(dir).empty());
}

TEST(Checkpoint, DescribeSummarizes) {
  TempDir run;
  std::string dir = save_simple(run.path, 12);
  std::string text = describe(dir);
  EXPECT_NE(text.find("step        12"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 'infill'"), std::string::npos) << text;
  EXPECT_NE(text.find(dice::str(testing::tiny_tensors(0).size(), " tensors")), std::string::npos) << text;
  EXPECT_NE(text.find("bfloat16: 2"), std::string::npos) << text;
  // model 8 + state 9 (5 scalars, 2 strings, 2 RNG entries) + optimizer 6 (step, rank, 2 m, 2 v).
  EXPECT_NE(text.find("verified    ok: all 23 datasets"), std::string::npos) << text;
  EXPECT_NE(text.find("files       COMPLETE model.h5 optim_rank0.h5 state.h5"), std::string::npos) << text;
  EXPECT_NE(text.find("learner ranks 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace dice::ckpt
