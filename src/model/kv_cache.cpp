// KV cache: per-layer K/V [B, kv_heads, max_len, head_dim], slot = absolute position.
#include "dice/model/kv_cache.h"

#include <torch/torch.h>

#include "dice/util/error.h"

namespace dice::model {

KVCache::KVCache(const ModelConfig& cfg, int64_t batch, int64_t max_len, torch::Dtype dtype, torch::Device device)
    : batch_(batch), max_len_(max_len) {
  DICE_REQUIRE(batch > 0 && max_len > 0, "A KV cache needs batch > 0 and max_len > 0; got ", batch, " and ", max_len, ".");
  auto o = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    k_.push_back(torch::zeros({batch, cfg.num_key_value_heads, max_len, cfg.head_dim}, o));
    v_.push_back(torch::zeros({batch, cfg.num_key_value_heads, max_len, cfg.head_dim}, o));
  }
  lengths_ = torch::zeros({batch}, torch::TensorOptions().dtype(torch::kInt64).device(device));
}

torch::Tensor& KVCache::k(int64_t layer) {
  DICE_CHECK(layer >= 0 && layer < num_layers());
  return k_[static_cast<size_t>(layer)];
}

torch::Tensor& KVCache::v(int64_t layer) {
  DICE_CHECK(layer >= 0 && layer < num_layers());
  return v_[static_cast<size_t>(layer)];
}

void KVCache::set_lengths(const torch::Tensor& lengths_B) {
  DICE_REQUIRE(lengths_B.dim() == 1 && lengths_B.size(0) == batch_, "KV cache lengths must be [", batch_, "]; got ",
               lengths_B.sizes(), ".");
  lengths_.copy_(lengths_B);
}

void KVCache::advance(int64_t n) { lengths_.add_(n); }

void KVCache::advance(const torch::Tensor& n_B) {
  DICE_REQUIRE(n_B.dim() == 1 && n_B.size(0) == batch_, "KV cache advance needs [", batch_, "] counts; got ", n_B.sizes(), ".");
  lengths_.add_(n_B.to(lengths_.device(), torch::kInt64));
}

void KVCache::reset() { lengths_.zero_(); }

void KVCache::release() {
  k_.clear();
  v_.clear();
  k_.shrink_to_fit();
  v_.shrink_to_fit();
}

int64_t KVCache::bytes() const {
  int64_t n = 0;
  for (const auto& t : k_) n += t.numel() * static_cast<int64_t>(t.element_size());
  for (const auto& t : v_) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

KVCache KVCache::rows(int64_t first, int64_t count) {
  DICE_REQUIRE(allocated(), "The KV cache was released; allocate a new one.");
  DICE_REQUIRE(first >= 0 && count > 0 && first + count <= batch_, "KV cache rows [", first, ", ", first + count,
               ") are outside the cache's ", batch_, " rows.");
  KVCache view;
  view.batch_ = count;
  view.max_len_ = max_len_;
  for (size_t l = 0; l < k_.size(); ++l) {
    view.k_.push_back(k_[l].narrow(0, first, count));
    view.v_.push_back(v_[l].narrow(0, first, count));
  }
  view.lengths_ = lengths_.narrow(0, first, count);
  return view;
}

void KVCache::write(int64_t layer, const torch::Tensor& k_BHLD, const torch::Tensor& v_BHLD, const torch::Tensor& positions_BL) {
  auto& kc = k(layer);
  auto& vc = v(layer);
  DICE_REQUIRE(k_BHLD.scalar_type() == kc.scalar_type(), "The KV cache holds ", kc.scalar_type(),
               " but the model produces ", k_BHLD.scalar_type(), "; allocate the cache in the model's dtype.");
  const int64_t B = k_BHLD.size(0), H = k_BHLD.size(1), L = k_BHLD.size(2), D = k_BHLD.size(3);
  // scatter_ along the slot dimension; the expanded index is a view (no allocation).
  auto idx = positions_BL.to(kc.device(), torch::kInt64).reshape({B, 1, L, 1}).expand({B, H, L, D});
  kc.scatter_(2, idx, k_BHLD);
  vc.scatter_(2, idx, v_BHLD);
}

}  // namespace dice::model
