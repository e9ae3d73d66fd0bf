// Masks against per-element reference loops written from the recipe's wording (§2.3, §2.4, §4.6).
#include "dice/model/masks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "dice/util/error.h"

namespace dice::model {
namespace {

void expect_mask_eq(const torch::Tensor& got, const torch::Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.scalar_type(), torch::kBool);
  auto diff = got.ne(want).nonzero();
  EXPECT_EQ(diff.size(0), 0) << "first mismatch at " << (diff.size(0) ? diff[0] : diff);
}

// SFT doubled sequence [noisy | clean]; packed examples; padding segment < 0.
TEST(Masks, SftMatchesReference) {
  const int64_t bs = 4;
  // Two packed examples (lengths 7 and 9) and 3 padding tokens; positions restart per example.
  std::vector<int64_t> seg = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1};
  std::vector<int64_t> pos;
  for (int i = 0; i < 7; ++i) pos.push_back(i);
  for (int i = 0; i < 9; ++i) pos.push_back(i);
  for (int i = 0; i < 3; ++i) pos.push_back(i);
  const int64_t n = static_cast<int64_t>(seg.size());
  auto seg_t = torch::tensor(seg).view({1, n}), pos_t = torch::tensor(pos).view({1, n});
  auto got = sft_mask(torch::cat({seg_t, seg_t.flip(1)}), torch::cat({pos_t, pos_t.flip(1)}), bs);
  ASSERT_EQ(got.sizes(), (torch::IntArrayRef{2, 1, 2 * n, 2 * n}));
  for (int64_t b = 0; b < 2; ++b) {
    auto want = torch::zeros({2 * n, 2 * n}, torch::kBool);
    auto acc = want.accessor<bool, 2>();
    for (int64_t i = 0; i < 2 * n; ++i) {
      for (int64_t j = 0; j < 2 * n; ++j) {
        const int64_t qi = b == 0 ? i % n : n - 1 - i % n, kj = b == 0 ? j % n : n - 1 - j % n;
        const bool q_noisy = i < n, k_noisy = j < n;
        bool ok = false;
        if (seg[qi] == seg[kj] && seg[kj] >= 0) {
          const int64_t qb = pos[qi] / bs, kb = pos[kj] / bs;
          if (q_noisy && k_noisy) ok = qb == kb;          // same block, bidirectional
          if (q_noisy && !k_noisy) ok = kb < qb;          // strictly earlier clean blocks
          if (!q_noisy && !k_noisy) ok = kb <= qb;        // block-causal
        }
        acc[i][j] = ok || i == j;
      }
    }
    expect_mask_eq(got[b][0], want);
  }
}

// TraceRL rows [prompt | clean | noisy] (§4.6).
TEST(Masks, TraceRlMatchesReference) {
  const int64_t bs = 4, L0 = 10, L1 = 9;
  // Row 0: 3 left-pad tokens; row 1: no padding.
  auto valid = torch::ones({2, L0}, torch::kBool);
  valid[0].narrow(0, 0, 3).fill_(false);
  auto got = tracerl_mask(valid, L1, bs);
  const int64_t T = L0 + 2 * L1;
  ASSERT_EQ(got.sizes(), (torch::IntArrayRef{2, 1, T, T}));
  for (int64_t b = 0; b < 2; ++b) {
    auto row = valid[b].contiguous();
    auto v = row.accessor<bool, 1>();
    auto want = torch::zeros({T, T}, torch::kBool);
    auto acc = want.accessor<bool, 2>();
    // kind 0 = prompt, 1 = clean, 2 = noisy; prompt blocks counted backwards from the prompt end.
    auto kind = [&](int64_t i) { return i < L0 ? 0 : (i < L0 + L1 ? 1 : 2); };
    auto pblock_from_end = [&](int64_t i) { return (L0 - 1 - i) / bs; };
    auto rblock = [&](int64_t i) { return ((i - L0) % L1) / bs; };
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t j = 0; j < T; ++j) {
        bool ok = false;
        const bool key_ok = kind(j) != 0 || v[j];
        if (kind(i) == 0) {
          ok = v[i] && kind(j) == 0 && key_ok && pblock_from_end(j) >= pblock_from_end(i);
        } else if (kind(i) == 1) {
          ok = (kind(j) == 0 && key_ok) || (kind(j) == 1 && rblock(j) <= rblock(i));
        } else {
          ok = (kind(j) == 0 && key_ok) || (kind(j) == 1 && rblock(j) < rblock(i)) ||
               (kind(j) == 2 && rblock(j) == rblock(i));
        }
        acc[i][j] = ok || i == j;
      }
    }
    expect_mask_eq(got[b][0], want);
  }
  auto positions = tracerl_positions(valid, L1);
  ASSERT_EQ(positions.sizes(), (torch::IntArrayRef{2, T}));
  // Row 0: pads 0, prompt 0..6, response 7..15 twice.
  EXPECT_EQ(positions[0][0].item<int64_t>(), 0);
  EXPECT_EQ(positions[0][3].item<int64_t>(), 0);
  EXPECT_EQ(positions[0][L0 - 1].item<int64_t>(), 6);
  EXPECT_EQ(positions[0][L0].item<int64_t>(), 7);
  EXPECT_EQ(positions[0][L0 + L1].item<int64_t>(), 7);
  EXPECT_EQ(positions[1][L0].item<int64_t>(), 10);
  EXPECT_EQ(positions[1][T - 1].item<int64_t>(), 10 + L1 - 1);
}

TEST(Masks, PrefillAndDecodeMatchReference) {
  const int64_t bs = 4, L = 11;
  auto lengths = torch::tensor(std::vector<int64_t>{11, 6, 0});
  auto got = prefill_mask(lengths, L, bs);
  ASSERT_EQ(got.sizes(), (torch::IntArrayRef{3, 1, L, L}));
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t len = lengths[b].item<int64_t>();
    auto want = torch::zeros({L, L}, torch::kBool);
    auto acc = want.accessor<bool, 2>();
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) acc[i][j] = (i < len && j < len && j / bs <= i / bs) || i == j;
    expect_mask_eq(got[b][0], want);
  }
  auto lens = torch::tensor(std::vector<int64_t>{8, 0, 12});
  auto dm = decode_mask(lens, bs, 20);
  ASSERT_EQ(dm.sizes(), (torch::IntArrayRef{3, 1, bs, 20}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < bs; ++i)
      for (int64_t j = 0; j < 20; ++j)
        EXPECT_EQ(dm[b][0][i][j].item<bool>(), j < lens[b].item<int64_t>() + bs) << b << " " << i << " " << j;
}

TEST(Masks, AdditiveAndErrors) {
  auto m = prefill_mask(torch::tensor(std::vector<int64_t>{5}), 5, 4);
  auto add = to_additive_mask(m, torch::kFloat32);
  EXPECT_TRUE(add.masked_select(m).eq(0).all().item<bool>());
  EXPECT_TRUE(add.masked_select(m.logical_not()).isinf().all().item<bool>());
  EXPECT_THROW(prefill_mask(torch::zeros({2, 2}, torch::kInt64), 4, 4), Error);
  EXPECT_THROW(decode_mask(torch::zeros({2}, torch::kInt64), 4, 2), Error);
  EXPECT_THROW(sft_mask(torch::zeros({1, 3}, torch::kInt64), torch::zeros({1, 4}, torch::kInt64), 4), Error);
  EXPECT_THROW(tracerl_mask(torch::ones({3}, torch::kBool), 4, 4), Error);
}

}  // namespace
}  // namespace dice::model
