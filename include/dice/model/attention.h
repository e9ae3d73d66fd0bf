#pragma once
// Grouped-query attention for the model (and its benchmarks): one mask preparation per forward, then
// SDPA per layer without repeating K and V; the plain math where the torch has no SDPA (1.13).
#include <torch/types.h>

#include <limits>

#include "dice/util/torch_compat.h"

namespace dice::model {

// Grouped-query attention with a mask, in two steps:
//
//  1. prepare_attention_mask(mask, groups, dtype), once per forward: mask bool [B|1, 1, Lq, Lk]
//     (true = attend) or undefined. The G = groups query heads that share a kv head are folded into
//     the query length, so the mask becomes [B|1, 1, G*Lq, Lk]; with torch >= 2.1 it is also turned
//     into an additive bias in `dtype` (0 / -inf) whose rows are padded to a multiple of 16
//     elements, so SDPA's memory-efficient kernel takes it without a copy per layer.
//  2. sdpa_gqa(q, k, v, prepared_mask, scale) per layer: q_BHLD [B, Hq, Lq, D], k_BHKD / v_BHKD
//     [B, Hkv, Lk, D] with Hq = G * Hkv (query head h uses kv head h / G, as HF's repeat_kv).
//     Returns [B, Hq, Lq, D]. K and V (e.g. a whole KV cache) are never repeated. Every query row
//     must have at least one allowed key. torch 1.13 has no SDPA and gets the plain math.
inline torch::Tensor prepare_attention_mask(const torch::Tensor& mask, int64_t groups, torch::Dtype dtype) {
  if (!mask.defined()) return mask;
  torch::Tensor m = mask;
  const int64_t B = m.size(0), Lq = m.size(2), Lk = m.size(3);
  if (groups > 1) m = m.unsqueeze(2).expand({B, 1, groups, Lq, Lk}).reshape({B, 1, groups * Lq, Lk});
#if DICE_TORCH_AT_LEAST(2, 1)
  const int64_t Lk_pad = (Lk + 15) / 16 * 16;
  auto bias = torch::full({B, 1, groups * Lq, Lk_pad}, -std::numeric_limits<double>::infinity(),
                          torch::TensorOptions().dtype(dtype).device(m.device()));
  auto view = bias.narrow(-1, 0, Lk);
  view.masked_fill_(m, 0.0);
  return view;
#else
  (void)dtype;
  return m;
#endif
}

inline torch::Tensor sdpa_gqa(const torch::Tensor& q_BHLD, const torch::Tensor& k_BHKD,
                              const torch::Tensor& v_BHKD, const torch::Tensor& prepared_mask, double scale) {
  const int64_t B = q_BHLD.size(0), Hq = q_BHLD.size(1), Lq = q_BHLD.size(2), D = q_BHLD.size(3);
  const int64_t Hkv = k_BHKD.size(1), G = Hq / Hkv;
  auto q = q_BHLD.reshape({B, Hkv, G * Lq, D});
#if DICE_TORCH_AT_LEAST(2, 1)
  c10::optional<at::Tensor> m;
  if (prepared_mask.defined()) m = prepared_mask;
  auto o = at::scaled_dot_product_attention(q, k_BHKD, v_BHKD, m, 0.0, /*is_causal=*/false, scale);
  return o.reshape({B, Hq, Lq, D});
#else
  auto scores = torch::matmul(q, k_BHKD.transpose(-2, -1)).mul_(scale).to(torch::kFloat32);
  if (prepared_mask.defined()) scores.masked_fill_(prepared_mask.logical_not(), -std::numeric_limits<float>::infinity());
  auto p = torch::softmax(scores, -1).to(v_BHKD.scalar_type());
  return torch::matmul(p, v_BHKD).reshape({B, Hq, Lq, D});
#endif
}

}  // namespace dice::model
