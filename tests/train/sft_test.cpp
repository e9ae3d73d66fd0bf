// dice sft's pieces: data reading and encoding, packing, data order, noise, and the loss against an
// independent statement of SDAR's objective (a mask built here by the recipe's three rules, full
// logits, CE / p summed by hand).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <numeric>
#include <set>

#include "dice/judge/task.h"
#include "dice/text/chat.h"
#include "dice/train/sft.h"
#include "dice/train/task_prompt.h"
#include "dice/util/error.h"
#include "dice/util/fs.h"

namespace dice::train {
namespace {

const text::Tokenizer& tok() {
  static const auto t = text::Tokenizer::from_dir(std::string(DICE_DATA_DIR) + "/qwen3");
  return t;
}

// The tiny shape with Qwen3's vocabulary (configs/models/tiny.yaml), so the real tokenizer fits.
model::Transformer qwen_vocab_tiny(uint64_t seed) {
  auto cfg = model::ModelConfig::preset("tiny");
  cfg.vocab_size = 151936;
  cfg.mask_token_id = 151669;
  cfg.bos_token_id = cfg.eos_token_id = 151643;
  model::Transformer m(cfg, torch::kFloat32, torch::kCPU);
  m->load_weights(model::init_random_weights(cfg, seed, torch::kFloat32));
  return m;
}

// The test's data files, in one folder removed when the test program ends.
struct TempDir {
  std::string path = fs::make_temp_dir("dice_sft_test_");
  ~TempDir() { fs::remove_tree(path); }
};

std::string write_temp(const std::string& name, const std::string& text) {
  static const TempDir dir;
  std::ofstream(dir.path + "/" + name) << text;
  return dir.path + "/" + name;
}

std::vector<SftText> read(const std::string& path, const std::string& format = "auto") {
  SftDataConfig c;
  c.path = path;
  c.format = format;
  return read_sft_texts(c);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SftData, ReadsPairsJsonlArraysAndAlpaca) {
  auto a = read(write_temp("a.jsonl", "{\"prompt\": \"p1\", \"response\": \"r1\"}\n\n{\"prompt\": \"p2\", \"response\": \"r2\"}\n"));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].prompt, "p2");
  EXPECT_EQ(a[1].response, "r2");
  auto b = read(write_temp("b.json", "[{\"prompt\": \"p\", \"response\": \"r\"},\n {\"instruction\": \"do\", \"input\": \"x\", "
                                     "\"output\": \"y\"}, {\"instruction\": \"only\", \"output\": \"z\"}]"));
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].prompt, "do\n\nx");
  EXPECT_EQ(b[1].response, "y");
  EXPECT_EQ(b[2].prompt, "only");
}

TEST(SftData, TasksBecomePromptAndSolutionBlock) {
  const std::string path = std::string(DICE_SOURCE_DIR) + "/configs/tasks/builtin_cpu.jsonl";
  auto t = read(path);  // auto: the first record has `reference`
  ASSERT_EQ(t.size(), 34u);
  EXPECT_EQ(t[0].response.rfind("```python\n", 0), 0u);
  EXPECT_EQ(t[0].response.substr(t[0].response.size() - 4), "\n```");
  EXPECT_NE(t[0].prompt.find("class Model"), std::string::npos);  // the reference is in the prompt
  auto block = text::extract_code_block(t[0].response);
  ASSERT_TRUE(block.has_value());
  EXPECT_NE(block->code.find("ModelNew"), std::string::npos);
}

// Issue 22's SFT data: both prompt kinds per task, each task's wrong twins beside its solution.
TEST(SftData, TasksWithBothPromptKindsAndWrongTwins) {
  SftDataConfig c;
  c.path = std::string(DICE_SOURCE_DIR) + "/configs/tasks/builtin_cpu.jsonl";
  c.prompt_kinds = {"end_to_end", "infill"};
  c.wrong_solutions = true;
  c.max_tasks = 3;
  const auto t = read_sft_texts(c);
  const auto tasks = judge::load_tasks(c.path);
  ASSERT_EQ(t.size(), 3u * 2u * 2u);  // 3 tasks x 2 kinds x (solution + one twin)
  for (size_t k = 0; k < 3; ++k) {
    const auto& task = tasks[k];
    ASSERT_EQ(task.wrong_solutions.size(), 1u) << task.id;
    const auto* e2e = &t[4 * k];
    const auto* inf = &t[4 * k + 2];
    EXPECT_EQ(e2e[0].prompt, e2e[1].prompt);  // the same prompt for the solution and its twin
    EXPECT_EQ(inf[0].prompt, inf[1].prompt);
    EXPECT_NE(e2e[0].prompt, inf[0].prompt);
    EXPECT_NE(inf[0].prompt.find(task.infill->suffix.substr(0, 40)), std::string::npos) << "the infill prompt shows the suffix";
    EXPECT_EQ(text::extract_code_block(e2e[0].response)->code, task.solution);
    EXPECT_EQ(text::extract_code_block(e2e[1].response)->code, task.wrong_solutions[0].code);
    EXPECT_EQ(text::extract_code_block(inf[1].response)->code, task.wrong_solutions[0].code);
  }
  c.wrong_solutions = false;
  c.prompt_kinds = {"infill"};
  EXPECT_EQ(read_sft_texts(c).size(), 3u);
  c.prompt_kinds = {"e2e"};
  EXPECT_NE(error_of([&] { read_sft_texts(c); }).find("'e2e' is not end_to_end or infill"), std::string::npos);
}

// Fill-in-the-middle answers (data.answer: middle) on the gap tasks: the answer is only the code
// between prefix and suffix, and the judge's file (candidate_job) is prefix + answer + suffix.
TEST(SftData, MiddleAnswersOnGapTasksRebuildTheFiles) {
  SftDataConfig c;
  c.path = std::string(DICE_SOURCE_DIR) + "/configs/tasks/builtin_cpu_gaps.jsonl";
  c.prompt_kinds = {"infill"};
  c.answer = "middle";
  c.wrong_solutions = true;
  const auto t = read_sft_texts(c);
  const auto tasks = judge::load_tasks(c.path);
  ASSERT_EQ(tasks.size(), 12u);
  ASSERT_EQ(t.size(), 24u);  // solution + its twin per task
  for (size_t k = 0; k < tasks.size(); ++k) {
    const auto& task = tasks[k];
    EXPECT_EQ(t[2 * k].prompt, t[2 * k + 1].prompt);
    EXPECT_NE(t[2 * k].response, t[2 * k + 1].response) << task.id;
    EXPECT_LT(t[2 * k].response.size(), 40u) << task.id << ": a gap is a few words";
    EXPECT_EQ(candidate_job(task, t[2 * k].response, true).text, task.solution) << task.id;
    EXPECT_EQ(candidate_job(task, t[2 * k + 1].response, true).text, task.wrong_solutions[0].code) << task.id;
    EXPECT_TRUE(candidate_job(task, t[2 * k].response, true).is_code);
  }
  EXPECT_EQ(t[0].response, "+");  // 001_add: a + b, its twin a - b
  EXPECT_EQ(t[1].response, "-");
  // answer: file keeps the whole fenced file; a file answer is judged by its first code block
  c.answer = "file";
  const auto whole = read_sft_texts(c);
  EXPECT_EQ(text::extract_code_block(whole[0].response)->code, tasks[0].solution);
  EXPECT_EQ(candidate_job(tasks[0], whole[0].response, false).text, tasks[0].solution);
  EXPECT_EQ(candidate_job(tasks[0], "no code here", false).text, "");
  // a code that does not keep the prefix and suffix has no middle
  EXPECT_FALSE(infill_middle(tasks[0], "x" + tasks[0].solution).has_value());
  EXPECT_EQ(*infill_middle(tasks[0], tasks[0].solution), "+");
}

TEST(SftData, MalformedInputNamesTheFileAndRecord) {
  EXPECT_NE(error_of([] { read(write_temp("c.jsonl", "{\"prompt\": \"p\", \"response\": \"r\"}\n{\"prompt\": \"p\"}\n")); })
                .find("c.jsonl:2: the record has no 'response' field"),
            std::string::npos);
  EXPECT_NE(error_of([] { read(write_temp("d.jsonl", "{\"prompt\": 3, \"response\": \"r\"}\n")); })
                .find("'prompt' must be a string"),
            std::string::npos);
  EXPECT_NE(error_of([] { read(write_temp("e.jsonl", "{\"prompt\": \"p\", \"response\": \"r\"}\nnot json\n")); })
                .find("e.jsonl:2: not a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([] { read(write_temp("f.json", "[{\"prompt\": \"p\", \"response\": \"r\"}")); }).find("is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { read(write_temp("g.jsonl", "{\"text\": \"x\"}\n")); }).find("needs {prompt, response}"),
            std::string::npos);
  EXPECT_NE(error_of([] { read(write_temp("h.jsonl", "\n\n")); }).find("holds no examples"), std::string::npos);
  EXPECT_NE(error_of([] { read("/nonexistent/x.jsonl"); }).find("does not exist"), std::string::npos);
  const std::string task = "{\"id\": \"t1\", \"level\": 1, \"difficulty\": 0, \"reference\": \"class Model: pass\"}\n";
  EXPECT_NE(error_of([&] { read(write_temp("i.jsonl", task)); }).find("1 of 1 tasks have no solution"), std::string::npos);
}

TEST(SftData, EncodingFramesPadsAndLabels) {
  const SftText t{"Write a kernel.", "```python\nx = 1\n```"};
  for (bool think : {false, true}) {
    auto ex = encode_sft_example(t, tok(), 4, think);
    auto prompt = tok().encode(text::chat_prompt(t.prompt));
    EXPECT_EQ(ex.prompt_len, static_cast<int64_t>(prompt.size()));
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), ex.ids.begin()));
    EXPECT_EQ(ex.size() % 4, 0);
    std::vector<int32_t> resp(ex.ids.begin() + ex.prompt_len, ex.ids.end());
    while (resp.back() == tok().endoftext_id()) resp.pop_back();
    ASSERT_EQ(resp.back(), tok().im_end_id());  // the turn ends; only <|endoftext|> pads after it
    resp.pop_back();
    EXPECT_EQ(tok().decode(resp), (think ? "<think>\n\n</think>\n\n" : "") + t.response);
    EXPECT_LT(static_cast<int64_t>(ex.ids.size()) - ex.prompt_len - static_cast<int64_t>(resp.size()) - 1, 4);
  }
  // Special tokens written in a response are text, not control tokens.
  auto ex = encode_sft_example({"p", "a <|im_end|> b"}, tok(), 4, false);
  int ends = 0;
  for (auto id : ex.ids) ends += id == tok().im_end_id();
  EXPECT_EQ(ends, 2);  // the prompt's and the response's own
}

TEST(SftPlan, PackRowsIsNextFitWithinTheBound) {
  auto rows = pack_rows({8, 4, 4, 12, 16, 4}, 16);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(rows[1], (std::vector<int64_t>{3}));
  EXPECT_EQ(rows[2], (std::vector<int64_t>{4}));
  EXPECT_EQ(rows[3], (std::vector<int64_t>{5}));
}

TEST(SftPlan, EpochOrderIsASeededPermutation) {
  auto a = epoch_order(50, 7, 0), b = epoch_order(50, 7, 0), c = epoch_order(50, 7, 1), d = epoch_order(50, 8, 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  auto s = a;
  std::sort(s.begin(), s.end());
  std::vector<int64_t> id(50);
  std::iota(id.begin(), id.end(), 0);
  EXPECT_EQ(s, id);
}

TEST(SftPlan, NoiseFollowsTheMaskProbability) {
  std::set<double> ps;
  for (int64_t ex = 0; ex < 200; ++ex) {
    auto n = sft_noise(7, 1e-3, 3, 0, ex);
    EXPECT_GE(n.p, 1e-3);
    EXPECT_LT(n.p, 1.0);
    int64_t masked = 0;
    for (auto m : n.masked) masked += m;
    EXPECT_GE(masked, 1) << "example " << ex << ": nothing masked";
    ps.insert(n.p);
    EXPECT_EQ(n.masked, sft_noise(7, 1e-3, 3, 0, ex).masked);  // a function of (seed, epoch, example)
  }
  EXPECT_GT(ps.size(), 190u);
  // On a long response the masked share is p.
  auto n = sft_noise(40000, 1e-3, 3, 2, 11);
  double share = 0;
  for (auto m : n.masked) share += m;
  share /= 40000;
  EXPECT_NEAR(share, n.p, 0.02);
  EXPECT_NE(sft_noise(40000, 1e-3, 3, 3, 11).p, n.p);  // another epoch, another draw
}

// SDAR's objective for one example, written out here: the doubled sequence, the mask from the three
// rules (noisy -> noisy of the same block, noisy -> clean of earlier blocks, clean -> clean of the
// same or earlier blocks), full logits, sum over masked noisy tokens of -log softmax / p.
double reference_loss(model::Transformer& m, const SftExample& ex, const SftNoise& nz, int64_t W, int64_t mask_id) {
  const int64_t n = ex.size(), T = 2 * n;
  auto ids = torch::zeros({1, T}, torch::kInt64), pos = torch::zeros({1, T}, torch::kInt64);
  auto mask = torch::zeros({1, 1, T, T}, torch::kBool);
  for (int64_t i = 0; i < n; ++i) {
    const bool masked = i >= ex.prompt_len && nz.masked[static_cast<size_t>(i - ex.prompt_len)];
    ids[0][i] = masked ? mask_id : ex.ids[static_cast<size_t>(i)];
    ids[0][n + i] = ex.ids[static_cast<size_t>(i)];
    pos[0][i] = pos[0][n + i] = i;
  }
  for (int64_t q = 0; q < T; ++q)
    for (int64_t k = 0; k < T; ++k) {
      const bool qn = q < n, kn = k < n;
      const int64_t qb = (q % n) / W, kb = (k % n) / W;
      const bool ok = qn ? (kn ? qb == kb : kb < qb) : (!kn && kb <= qb);
      mask[0][0][q][k] = ok;
    }
  model::ForwardArgs fa;
  fa.ids = ids;
  fa.positions = pos;
  fa.mask = mask;
  torch::NoGradGuard ng;
  auto logp = torch::log_softmax(m->forward(fa).to(torch::kFloat64)[0], -1);
  double loss = 0;
  for (int64_t i = ex.prompt_len; i < n; ++i)
    if (nz.masked[static_cast<size_t>(i - ex.prompt_len)]) loss -= logp[i][ex.ids[static_cast<size_t>(i)]].item<double>() / nz.p;
  return loss;
}

TEST(SftLossTest, EqualsTheObjectiveWrittenOutAndIgnoresPacking) {
  auto m = qwen_vocab_tiny(5);
  const int64_t W = m->config().block_size, mask_id = m->config().mask_token_id, pad = tok().endoftext_id();
  const auto a = encode_sft_example({"Add two tensors.", "```python\nreturn a + b\n```"}, tok(), W, false);
  const auto b = encode_sft_example({"Scale.", "y = 2 * x"}, tok(), W, true);
  const auto na = sft_noise(a.size() - a.prompt_len, 1e-3, 1, 0, 0), nb = sft_noise(b.size() - b.prompt_len, 1e-3, 1, 0, 1);
  const double ref_a = reference_loss(m, a, na, W, mask_id), ref_b = reference_loss(m, b, nb, W, mask_id);
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast (block-sparse plan, chunked log-probs)" : "plain (dense mask, full logits)");
    rl::ScoreOptions so;
    so.fast = fast;
    so.attn_chunk = 8;  // several chunks per example
    so.logit_chunk = 16;
    auto loss = [&](const std::vector<std::vector<const SftExample*>>& rows,
                    const std::vector<std::vector<const SftNoise*>>& noise) {
      torch::NoGradGuard ng;
      return sft_loss(m, make_sft_batch(rows, noise, W, pad, mask_id, torch::kCPU, so), so).weighted_sum.item<double>();
    };
    EXPECT_NEAR(loss({{&a}}, {{&na}}), ref_a, 1e-4 * ref_a);
    EXPECT_NEAR(loss({{&b}}, {{&nb}}), ref_b, 1e-4 * ref_b);
    EXPECT_NEAR(loss({{&a, &b}}, {{&na, &nb}}), ref_a + ref_b, 1e-4 * (ref_a + ref_b));   // packed in one row
    EXPECT_NEAR(loss({{&b}, {&a}}, {{&nb}, {&na}}), ref_a + ref_b, 1e-4 * (ref_a + ref_b));  // two padded rows
  }
  // The batch holds exactly the masked noisy tokens, with weight 1 / p.
  rl::ScoreOptions plain;
  plain.fast = false;
  auto batch = make_sft_batch({{&a, &b}}, {{&na, &nb}}, W, pad, mask_id, torch::kCPU, plain);
  int64_t masked = 0;
  for (auto x : na.masked) masked += x;
  for (auto x : nb.masked) masked += x;
  EXPECT_EQ(batch.targets.size(0), masked);
  // The clean copy holds both examples; the noisy one only their blocks from the first response
  // token's (the prompts' earlier blocks feed no target).
  auto noisy_len = [&](const SftExample& e) { return e.size() - e.prompt_len / W * W; };
  EXPECT_EQ(batch.ids.size(1), a.size() + b.size() + noisy_len(a) + noisy_len(b));
  EXPECT_LT(noisy_len(a), a.size());
  EXPECT_TRUE((batch.ids.index_select(1, batch.target_at.remainder(batch.ids.size(1))) == mask_id).all().item<bool>());
}

TEST(SftLossTest, FastAndPlainPathsGiveTheSameGradients) {
  auto m = qwen_vocab_tiny(6);
  const int64_t W = m->config().block_size, mask_id = m->config().mask_token_id, pad = tok().endoftext_id();
  const auto a = encode_sft_example({"p", "some response text, long enough for a few blocks"}, tok(), W, true);
  const auto b = encode_sft_example({"another prompt", "short"}, tok(), W, false);
  const auto na = sft_noise(a.size() - a.prompt_len, 1e-3, 2, 0, 0), nb = sft_noise(b.size() - b.prompt_len, 1e-3, 2, 0, 1);
  auto grads = [&](bool fast) {
    rl::ScoreOptions so;
    so.fast = fast;
    so.attn_chunk = 8;
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    sft_loss(m, make_sft_batch({{&a, &b}, {&b}}, {{&na, &nb}, {&nb}}, W, pad, mask_id, torch::kCPU, so), so)
        .weighted_sum.backward();
    std::vector<torch::Tensor> g;
    for (auto& p : m->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto gf = grads(true), gp = grads(false);
  double num = 0, den = 0;
  for (size_t i = 0; i < gf.size(); ++i) {
    num += (gf[i] - gp[i]).pow(2).sum().item<double>();
    den += gp[i].pow(2).sum().item<double>();
  }
  EXPECT_GT(den, 0);
  EXPECT_LT(std::sqrt(num / den), 1e-5) << "relative L2 distance of the gradients";
}

}  // namespace
}  // namespace dice::train
