#pragma once
// Torch version differences (LibTorch 1.13 on CPU machines, 2.x on GPU nodes), in one place.
#include <torch/types.h>
#include <torch/version.h>

#include <limits>

#define DICE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace dice::compat {

// Scaled dot-product attention with grouped-query heads and a boolean mask (true = attend).
//   q_BHLD [B, Hq, Lq, D], k_BHKD / v_BHKD [B, Hkv, Lk, D] with Hq % Hkv == 0 (query head h uses
//   kv head h / (Hq / Hkv), as HF's repeat_kv), mask bool broadcastable to [B, 1, Lq, Lk] or
//   undefined (attend everything). Returns [B, Hq, Lq, D]. Every query row must have at least one
//   allowed key.
// The G = Hq / Hkv query heads that share a kv head are folded into the query length
// ([B, Hkv, G*Lq, D]), so K and V (e.g. a whole KV cache) are never repeated, and torch >= 2.1 can
// pick its memory-efficient kernel, which takes an arbitrary mask; torch 1.13 has no SDPA and
// gets the plain math.
inline torch::Tensor sdpa_gqa(const torch::Tensor& q_BHLD, const torch::Tensor& k_BHKD,
                              const torch::Tensor& v_BHKD, const torch::Tensor& mask, double scale) {
  const int64_t B = q_BHLD.size(0), Hq = q_BHLD.size(1), Lq = q_BHLD.size(2), D = q_BHLD.size(3);
  const int64_t Hkv = k_BHKD.size(1), G = Hq / Hkv;
  auto q = q_BHLD.reshape({B, Hkv, G * Lq, D});
  torch::Tensor m = mask;
  if (m.defined() && G > 1) {
    // [B|1, 1, Lq, Lk] -> [B|1, 1, G*Lq, Lk]
    m = m.unsqueeze(2).expand({m.size(0), 1, G, Lq, m.size(-1)}).reshape({m.size(0), 1, G * Lq, m.size(-1)});
  }
#if DICE_TORCH_AT_LEAST(2, 1)
  c10::optional<at::Tensor> m_opt;
  if (m.defined()) m_opt = m;
  auto o = at::scaled_dot_product_attention(q, k_BHKD, v_BHKD, m_opt, 0.0, /*is_causal=*/false, scale);
  return o.reshape({B, Hq, Lq, D});
#else
  auto scores = torch::matmul(q, k_BHKD.transpose(-2, -1)).mul_(scale).to(torch::kFloat32);
  if (m.defined()) scores.masked_fill_(m.logical_not(), -std::numeric_limits<float>::infinity());
  auto p = torch::softmax(scores, -1).to(v_BHKD.scalar_type());
  return torch::matmul(p, v_BHKD).reshape({B, Hq, Lq, D});
#endif
}

}  // namespace dice::compat
