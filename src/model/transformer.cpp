// The SDAR / Qwen3 decoder: HF-named parameters, RoPE, GQA attention through sdpa_gqa,
// optional KV cache, lm_head restricted to the wanted positions.
//
// Shape legend: B batch, L query tokens, K key tokens (L, or kv_span with a cache), H hidden,
// Hq / Hkv query / kv heads, D head_dim, F ffn, V vocab, N selected positions.
#include "dice/model/transformer.h"

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <vector>

#include "dice/model/attention.h"
#include "dice/model/fused_ops.h"
#include "dice/model/masks.h"
#include "dice/model/train_ops.h"
#include "dice/util/error.h"

namespace dice::model {

namespace {

// A module that owns one parameter called "weight" (so named_parameters() spells HF names).
class WeightImpl : public torch::nn::Module {
 public:
  explicit WeightImpl(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};
TORCH_MODULE(Weight);

// Makes the parameters `parts` (same dtype and device, same trailing shape) views of consecutive
// rows of one tensor, so one GEMM does all their products; returns that tensor. `packed` keeps
// it; while the parameters still live in it (nothing moved or replaced them) it is returned as is.
// The parameters stay leaves with their own gradients; in-place updates (load_weights, optimizer
// steps, weight broadcasts) land in the packed rows.
const torch::Tensor& packed_rows(torch::Tensor& packed, std::initializer_list<torch::Tensor*> parts) {
  bool live = packed.defined();
  int64_t row = 0;
  for (auto* p : parts) {
    live = live && p->device() == packed.device() && p->scalar_type() == packed.scalar_type() &&
           p->data_ptr() == static_cast<char*>(packed.data_ptr()) + row * packed.stride(0) * packed.element_size();
    row += p->size(0);
  }
  if (live && row == packed.size(0)) return packed;
  // A plain tensor even inside the sampler's InferenceMode: the parameters must stay usable by
  // autograd and writable in place outside it.
  c10::InferenceMode normal_tensors(/*enabled=*/false);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> values;
  for (auto* p : parts) values.push_back(*p);
  packed = torch::cat(values, 0);
  row = 0;
  for (auto* p : parts) {
    const int64_t n = p->size(0);
    p->set_data(packed.narrow(0, row, n));
    row += n;
  }
  return packed;
}

// The attention pattern of an unfused forward: a prepared dense mask (prepare_attention_mask)
// or a block-sparse plan with its chunks' prepared masks.
struct AttnPattern {
  torch::Tensor dense;
  const SparseAttention* sparse = nullptr;
  std::vector<torch::Tensor> chunk_masks;
};

// Activation checkpointing of one layer: forward without saving activations (only the input),
// backward runs the layer's forward again with grad on and back-propagates through it, which
// also accumulates the parameters' gradients (the reentrant form of torch.utils.checkpoint).
struct LayerClosure : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> f;
};

class CheckpointLayer : public torch::autograd::Function<CheckpointLayer> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               c10::intrusive_ptr<LayerClosure> fn) {
    ctx->save_for_backward({x});
    auto* f = fn.get();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(std::move(fn));
    torch::NoGradGuard no_grad;
    return f->f(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto holder = ctx->saved_data["fn"].toCapsule();
    auto* f = static_cast<LayerClosure*>(holder.get());
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      y = f->f(x);
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return fused::rms_norm_reference(x, weight, eps); }

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const torch::TensorOptions& o)
      : hq(c.num_attention_heads), hkv(c.num_key_value_heads), d(c.head_dim) {
    q_proj = register_module("q_proj", Weight(torch::empty({hq * d, c.hidden_size}, o)));
    k_proj = register_module("k_proj", Weight(torch::empty({hkv * d, c.hidden_size}, o)));
    v_proj = register_module("v_proj", Weight(torch::empty({hkv * d, c.hidden_size}, o)));
    o_proj = register_module("o_proj", Weight(torch::empty({c.hidden_size, hq * d}, o)));
    q_norm = register_module("q_norm", RMSNorm(d, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(d, c.rms_norm_eps));
  }

  // x_BLH -> [B, L, H]; cos / signed sin ([-sin, sin] halves) _BLD in the model dtype; mask from
  // prepare_attention_mask.
  torch::Tensor forward(const torch::Tensor& x_BLH, const torch::Tensor& cos_BLD, const torch::Tensor& sin_BLD,
                        const AttnPattern& pattern, const ForwardArgs& a, int64_t layer) {
    if (a.train_fused) {
      auto qkv_BLN = train::packed_linear(x_BLH, packed_qkv(), {q_proj->weight, k_proj->weight, v_proj->weight});
      auto [q_BHLD, k_BHLD, v_BHLD] =
          train::qk_norm_rope(qkv_BLN, q_norm->weight, k_norm->weight, q_norm->eps, cos_BLD, sin_BLD, hq, hkv);
      if (pattern.sparse) return attend_sparse(q_BHLD, k_BHLD, v_BHLD, pattern, /*one_gather=*/true);
      return attend(q_BHLD, k_BHLD, v_BHLD, pattern.dense);
    }
    const int64_t B = x_BLH.size(0), L = x_BLH.size(1);
    auto cos_B1LD = cos_BLD.unsqueeze(1), sin_B1LD = sin_BLD.unsqueeze(1);
    auto q_BHLD = q_norm(torch::linear(x_BLH, q_proj->weight).view({B, L, hq, d})).transpose(1, 2);
    auto k_BHLD = k_norm(torch::linear(x_BLH, k_proj->weight).view({B, L, hkv, d})).transpose(1, 2);
    auto v_BHLD = torch::linear(x_BLH, v_proj->weight).view({B, L, hkv, d}).transpose(1, 2);
    q_BHLD = fused::rope_reference(q_BHLD, cos_B1LD, sin_B1LD);
    k_BHLD = fused::rope_reference(k_BHLD, cos_B1LD, sin_B1LD);
    torch::Tensor k_BHKD = k_BHLD, v_BHKD = v_BHLD;
    if (a.cache) {
      a.cache->write(layer, k_BHLD, v_BHLD, a.positions);
      k_BHKD = a.cache->k(layer).narrow(2, 0, a.kv_span);
      v_BHKD = a.cache->v(layer).narrow(2, 0, a.kv_span);
    }
    if (pattern.sparse) return attend_sparse(q_BHLD, k_BHKD, v_BHKD, pattern);
    return attend(q_BHLD, k_BHKD, v_BHKD, pattern.dense);
  }

  // The inference path (ForwardArgs::fused): one GEMM for q|k|v, then one fused operator for the
  // q/k norms, RoPE and the K/V writes at slots_BL (cache slots, or 0..L-1 into fresh buffers).
  torch::Tensor forward_fused(const torch::Tensor& h_BLH, const torch::Tensor& cos_BLD, const torch::Tensor& sin_BLD,
                              const torch::Tensor& mask, const torch::Tensor& slots_BL, const ForwardArgs& a,
                              int64_t layer) {
    const int64_t B = h_BLH.size(0), L = h_BLH.size(1);
    auto qkv_BLN = torch::linear(h_BLH, packed_qkv());
    torch::Tensor k_dst, v_dst;
    if (a.cache) {
      k_dst = a.cache->k(layer);
      v_dst = a.cache->v(layer);
    } else {
      k_dst = torch::empty({B, hkv, L, d}, qkv_BLN.options());
      v_dst = torch::empty({B, hkv, L, d}, qkv_BLN.options());
    }
    auto q_BHLD = fused::qk_norm_rope_scatter(qkv_BLN, q_norm->weight, k_norm->weight, q_norm->eps, cos_BLD, sin_BLD,
                                              slots_BL, k_dst, v_dst, hq, hkv);
    if (a.cache && !mask.defined()) {  // block decode (or a bidirectional prefill) over the cache
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      auto o_BLN = fused::decode_attention(q_BHLD, k_dst, v_dst, a.kv_lengths, a.kv_span, scale);
      return torch::linear(o_BLN, o_proj->weight);
    }
    const int64_t K = a.cache ? a.kv_span : L;
    return attend(q_BHLD, k_dst.narrow(2, 0, K), v_dst.narrow(2, 0, K), mask);
  }

  const torch::Tensor& packed_qkv() {
    return packed_rows(qkv_, {&q_proj->weight, &k_proj->weight, &v_proj->weight});
  }

  int64_t hq, hkv, d;
  Weight q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  torch::Tensor attend(const torch::Tensor& q_BHLD, const torch::Tensor& k_BHKD, const torch::Tensor& v_BHKD,
                       const torch::Tensor& mask) {
    const int64_t B = q_BHLD.size(0), L = q_BHLD.size(2);
    RECORD_USER_SCOPE("dice::attention");
    auto o_BHLD = sdpa_gqa(q_BHLD, k_BHKD, v_BHKD, mask, 1.0 / std::sqrt(static_cast<double>(d)));
    return torch::linear(o_BHLD.transpose(1, 2).reshape({B, L, hq * d}), o_proj->weight);
  }

  // Chunk by chunk over the plan: each chunk's queries, keys and values gathered from the flat
  // [heads, B * L, D] views, one SDPA call per chunk, the outputs put back at the queries' places
  // (padding queries, in no chunk, get 0).
  // With `one_gather` (ForwardArgs::train_fused) the chunks' gathers are train::gather_rows: the
  // same values, their gradients summed into one buffer.
  torch::Tensor attend_sparse(const torch::Tensor& q_BHLD, const torch::Tensor& k_BHLD, const torch::Tensor& v_BHLD,
                              const AttnPattern& pattern, bool one_gather = false) {
    RECORD_USER_SCOPE("dice::attention");
    const int64_t B = q_BHLD.size(0), L = q_BHLD.size(2);
    const auto& sp = *pattern.sparse;
    DICE_REQUIRE(sp.batch == B && sp.length == L && k_BHLD.size(2) == L, "The sparse attention plan is for ", sp.batch,
                 " rows of ", sp.length, " tokens but the batch has ", B, " rows of ", L, " (and ", k_BHLD.size(2),
                 " keys); a plan needs no KV cache.");
    auto q_HND = q_BHLD.transpose(0, 1).reshape({hq, B * L, d});
    auto k_HND = k_BHLD.transpose(0, 1).reshape({hkv, B * L, d});
    auto v_HND = v_BHLD.transpose(0, 1).reshape({hkv, B * L, d});
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<torch::Tensor> outs, qs, ks, vs;
    outs.reserve(sp.chunks.size());
    if (one_gather) {
      std::vector<torch::Tensor> q_index, k_index;
      for (const auto& c : sp.chunks) {
        q_index.push_back(c.q_index);
        k_index.push_back(c.k_index);
      }
      qs = train::gather_rows(q_HND, q_index);
      ks = train::gather_rows(k_HND, k_index);
      vs = train::gather_rows(v_HND, k_index);
    }
    for (size_t i = 0; i < sp.chunks.size(); ++i) {
      const auto& c = sp.chunks[i];
      auto q = (one_gather ? qs[i] : q_HND.index_select(1, c.q_index)).unsqueeze(0);
      auto k = (one_gather ? ks[i] : k_HND.index_select(1, c.k_index)).unsqueeze(0);
      auto v = (one_gather ? vs[i] : v_HND.index_select(1, c.k_index)).unsqueeze(0);
      outs.push_back(sdpa_gqa(q, k, v, pattern.chunk_masks[i], scale).squeeze(0));
    }
    auto o_HND = torch::zeros({hq, B * L, d}, q_BHLD.options());
    if (!outs.empty()) o_HND = o_HND.index_copy(1, sp.q_index, torch::cat(outs, 1));
    auto o_BLN = o_HND.view({hq, B, L, d}).permute({1, 2, 0, 3}).reshape({B, L, hq * d});
    return torch::linear(o_BLN, o_proj->weight);
  }

  torch::Tensor qkv_;  // q|k|v_proj rows (packed_rows): made at construction, remade if a parameter moved
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& c, const torch::TensorOptions& o) {
    gate_proj = register_module("gate_proj", Weight(torch::empty({c.intermediate_size, c.hidden_size}, o)));
    up_proj = register_module("up_proj", Weight(torch::empty({c.intermediate_size, c.hidden_size}, o)));
    down_proj = register_module("down_proj", Weight(torch::empty({c.hidden_size, c.intermediate_size}, o)));
  }
  torch::Tensor forward(const torch::Tensor& x, bool train_fused = false) {
    if (train_fused)  // ForwardArgs::train_fused
      return torch::linear(train::silu_mul(train::packed_linear(x, packed_gate_up(), {gate_proj->weight, up_proj->weight})),
                           down_proj->weight);
    return torch::linear(torch::silu(torch::linear(x, gate_proj->weight)) * torch::linear(x, up_proj->weight),
                         down_proj->weight);
  }
  // The inference path: one GEMM for gate|up, then silu(gate) * up in one operator.
  torch::Tensor forward_fused(const torch::Tensor& h) {
    return torch::linear(fused::silu_mul(torch::linear(h, packed_gate_up())), down_proj->weight);
  }
  const torch::Tensor& packed_gate_up() { return packed_rows(gate_up_, {&gate_proj->weight, &up_proj->weight}); }
  Weight gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  torch::Tensor gate_up_;  // gate|up_proj rows (packed_rows): made at construction, remade if one moved
};
TORCH_MODULE(Mlp);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& c, const torch::TensorOptions& o) {
    self_attn = register_module("self_attn", Attention(c, o));
    mlp = register_module("mlp", Mlp(c, o));
    input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin, const AttnPattern& pattern,
                        const ForwardArgs& a, int64_t layer) {
    if (a.train_fused) {
      x = x + self_attn->forward(train::rms_norm(x, input_layernorm->weight, input_layernorm->eps), cos, sin, pattern,
                                 a, layer);
      return x + mlp->forward(train::rms_norm(x, post_attention_layernorm->weight, post_attention_layernorm->eps), true);
    }
    x = x + self_attn->forward(input_layernorm(x), cos, sin, pattern, a, layer);
    return x + mlp->forward(post_attention_layernorm(x));
  }
  // The fused path: h is this layer's normed input, x the residual stream (updated in place);
  // returns the input of the next layer normed by next_norm (the final norm after the last layer).
  torch::Tensor forward_fused(torch::Tensor& x, const torch::Tensor& h, const torch::Tensor& cos,
                              const torch::Tensor& sin, const torch::Tensor& mask, const torch::Tensor& slots,
                              const ForwardArgs& a, int64_t layer, const RMSNormImpl& next_norm) {
    auto attn = self_attn->forward_fused(h, cos, sin, mask, slots, a, layer);
    auto h2 = fused::add_rms_norm_(x, attn, post_attention_layernorm->weight, post_attention_layernorm->eps);
    return fused::add_rms_norm_(x, mlp->forward_fused(h2), next_norm.weight, next_norm.eps);
  }
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

TransformerImpl::TransformerImpl(const ModelConfig& cfg, torch::Dtype dtype, torch::Device device)
    : cfg_(cfg), dtype_(dtype), device_(device) {
  cfg_.validate();
  auto o = torch::TensorOptions().dtype(dtype).device(device);
  model_ = register_module("model", std::make_shared<torch::nn::Module>());
  embed_weight_ = model_->register_module("embed_tokens", Weight(torch::empty({cfg_.vocab_size, cfg_.hidden_size}, o)))
                      ->weight;
  layers_ = model_->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) layers_->push_back(DecoderLayer(cfg_, o));
  norm_ = model_->register_module("norm", RMSNorm(cfg_.hidden_size, cfg_.rms_norm_eps));
  lm_head_weight_ = cfg_.tie_word_embeddings
                        ? embed_weight_
                        : register_module("lm_head", Weight(torch::empty({cfg_.vocab_size, cfg_.hidden_size}, o)))->weight;
  // Norm weights were created on the CPU in fp32; move everything to the target.
  to(device, dtype);
  auto exponent = torch::arange(0, cfg_.head_dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(cfg_.head_dim);
  inv_freq_ = torch::pow(cfg_.rope_theta, exponent).reciprocal().to(device);
  // Pack q|k|v and gate|up rows now (see packed_rows), outside any inference mode.
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    auto* layer = layers_[i]->as<DecoderLayerImpl>();
    layer->self_attn->packed_qkv();
    layer->mlp->packed_gate_up();
  }
  // to() replaced the parameter tensors' storage in place, but refresh the handles anyway.
  auto params = named_parameters();
  embed_weight_ = params["model.embed_tokens.weight"];
  lm_head_weight_ = cfg_.tie_word_embeddings ? embed_weight_ : params["lm_head.weight"];
}

void TransformerImpl::load_weights(const NamedTensors& weights) {
  torch::NoGradGuard no_grad;
  auto params = named_parameters(/*recurse=*/true);
  std::vector<std::string> missing, unexpected, misshaped;
  for (const auto& p : params) {
    auto it = weights.find(p.key());
    if (it == weights.end()) {
      missing.push_back(p.key());
    } else if (it->second.sizes() != p.value().sizes()) {
      misshaped.push_back(str(p.key(), " (expected ", p.value().sizes(), ", got ", it->second.sizes(), ")"));
    }
  }
  for (const auto& [name, t] : weights) {
    if (params.contains(name)) continue;
    if (cfg_.tie_word_embeddings && name == "lm_head.weight" && t.sizes() == embed_weight_.sizes()) continue;
    if (name.size() > 22 && name.compare(name.size() - 22, 22, "rotary_emb.inv_freq") == 0) continue;
    unexpected.push_back(name);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 8) s += str(", ... (", v.size(), " in all)");
    return s;
  };
  std::string problems;
  if (!missing.empty()) problems += str(" Missing: ", list(missing), ".");
  if (!unexpected.empty()) problems += str(" Unexpected: ", list(unexpected), ".");
  if (!misshaped.empty()) problems += str(" Wrong shape: ", list(misshaped), ".");
  DICE_REQUIRE(problems.empty(), "The weights do not match the model config (", cfg_.num_hidden_layers, " layers, hidden ",
               cfg_.hidden_size, ", vocab ", cfg_.vocab_size, ", tied embeddings ",
               cfg_.tie_word_embeddings ? "yes" : "no", ").", problems);
  for (auto& p : params) {
    const auto& src = weights.at(p.key());
    DICE_REQUIRE(src.is_floating_point(), "Weight ", p.key(), " has dtype ", src.scalar_type(),
                 "; model weights must be floating point.");
    p.value().copy_(src);
  }
}

NamedTensors TransformerImpl::state_dict(torch::Dtype dtype) const {
  NamedTensors out;
  for (const auto& p : named_parameters(true)) out[p.key()] = p.value().detach().to(torch::kCPU, dtype).clone();
  return out;
}

torch::Tensor TransformerImpl::hidden(const ForwardArgs& a) {
  DICE_REQUIRE(a.ids.defined() && a.ids.dim() == 2, "Model input ids must be [B, L]; got ",
               a.ids.defined() ? a.ids.sizes() : torch::IntArrayRef{}, ".");
  DICE_REQUIRE(a.positions.defined() && a.positions.sizes() == a.ids.sizes(), "Model position ids must match ids ",
               a.ids.sizes(), "; got ", a.positions.defined() ? a.positions.sizes() : torch::IntArrayRef{}, ".");
  const int64_t B = a.ids.size(0), L = a.ids.size(1);
  const int64_t K = a.cache ? a.kv_span : L;
  if (a.cache) {
    DICE_REQUIRE(a.cache->allocated(), "The KV cache was released; allocate a new one.");
    DICE_REQUIRE(a.cache->batch() == B, "The KV cache holds ", a.cache->batch(), " sequences but the batch has ", B, ".");
    DICE_REQUIRE(a.cache->num_layers() == cfg_.num_hidden_layers, "The KV cache has ", a.cache->num_layers(),
                 " layers but the model has ", cfg_.num_hidden_layers, ".");
    DICE_REQUIRE(a.kv_span > 0 && a.kv_span <= a.cache->max_len(), "kv_span ", a.kv_span, " must be in [1, ",
                 a.cache->max_len(), "] (the cache length).");
  }
  if (a.kv_lengths.defined()) {
    DICE_REQUIRE(a.cache && !a.mask.defined() && a.kv_lengths.dim() == 1 && a.kv_lengths.size(0) == B,
                 "kv_lengths needs a KV cache, no mask, and one length per row [", B, "]; got ", a.kv_lengths.sizes(),
                 a.cache ? "" : " without a cache", a.mask.defined() ? " with a mask" : "", ".");
  }
  if (a.sparse || a.checkpoint != 0) {
    DICE_REQUIRE(!a.cache && !a.fused && !a.mask.defined() && !a.kv_lengths.defined(),
                 "A sparse attention plan and activation checkpointing are for training forwards: no KV cache, no "
                 "dense mask, not fused.");
  }
  DICE_REQUIRE(!a.train_fused || (!a.cache && !a.fused && !a.kv_lengths.defined()),
               "ForwardArgs::train_fused is for training forwards: no KV cache, not the inference `fused` path.");
  if (a.mask.defined()) {
    DICE_REQUIRE(a.mask.dim() == 4 && (a.mask.size(0) == B || a.mask.size(0) == 1) && a.mask.size(1) == 1 &&
                     a.mask.size(2) == L && a.mask.size(3) == K,
                 "The attention mask must be [", B, " or 1, 1, ", L, ", ", K, "]; got ", a.mask.sizes(), ".");
    DICE_REQUIRE(a.mask.scalar_type() == torch::kBool, "The attention mask must be bool (true = attend).");
  }
  DICE_REQUIRE(!a.fused || !torch::GradMode::is_enabled(),
               "ForwardArgs::fused is for inference (its kernels have no backward): run it under torch::NoGradGuard.");
  // RoPE tables for these positions, computed once for all layers (fp32, then the model dtype);
  // sin with its first half negated (see fused::rope_reference).
  auto positions_BL = a.positions.to(device_, torch::kInt64);
  auto freqs_BLd = positions_BL.to(torch::kFloat32).unsqueeze(-1) * inv_freq_;
  auto emb_BLD = torch::cat({freqs_BLd, freqs_BLd}, -1);
  auto cos_BLD = emb_BLD.cos().to(dtype_);
  auto sin_BLD = emb_BLD.sin().to(dtype_);
  const int64_t half = cfg_.head_dim / 2;
  sin_BLD = torch::cat({sin_BLD.narrow(-1, 0, half).neg(), sin_BLD.narrow(-1, half, half)}, -1);

  // The mask in the form every layer's attention takes (folded over GQA groups, maybe additive).
  // kv_lengths: the fused path hands them to fused::decode_attention; the plain one masks.
  torch::Tensor bool_mask = a.mask.defined() ? a.mask.to(device_) : a.mask;
  if (a.kv_lengths.defined() && !a.fused) bool_mask = key_length_mask(a.kv_lengths.to(device_), L, K);
  auto mask = prepare_attention_mask(bool_mask, cfg_.num_attention_heads / cfg_.num_key_value_heads, dtype_);

  auto x_BLH = torch::embedding(embed_weight_, a.ids.to(device_));
  const int64_t n = cfg_.num_hidden_layers;
  if (a.fused) {
    // K/V go to the cache slots, or (no cache) to rows 0..L-1 of per-layer buffers.
    auto slots_BL = a.cache ? positions_BL : torch::arange(L, positions_BL.options()).expand({B, L});
    auto h_BLH = fused::rms_norm(x_BLH, layers_[0]->as<DecoderLayerImpl>()->input_layernorm->weight, cfg_.rms_norm_eps);
    for (int64_t i = 0; i < n; ++i) {
      const RMSNormImpl& next = i + 1 < n ? *layers_[i + 1]->as<DecoderLayerImpl>()->input_layernorm : *norm_;
      h_BLH = layers_[i]->as<DecoderLayerImpl>()->forward_fused(x_BLH, h_BLH, cos_BLD, sin_BLD, mask, slots_BL, a, i,
                                                                next);
    }
    return h_BLH;
  }
  AttnPattern pattern;
  pattern.dense = mask;
  if (a.sparse) {
    pattern.sparse = a.sparse;
    for (const auto& c : a.sparse->chunks)
      pattern.chunk_masks.push_back(
          prepare_attention_mask(c.mask.to(device_), cfg_.num_attention_heads / cfg_.num_key_value_heads, dtype_));
  }
  const int64_t checkpointed = !torch::GradMode::is_enabled() ? 0 : a.checkpoint < 0 ? n : a.checkpoint;
  for (int64_t i = 0; i < n; ++i) {
    auto* layer = layers_[i]->as<DecoderLayerImpl>();
    if (i < checkpointed) {
      auto fn = c10::make_intrusive<LayerClosure>();
      ForwardArgs la = a;  // tensors by handle, the plan by pointer: alive until backward
      fn->f = [layer, cos_BLD, sin_BLD, pattern, la, i](const torch::Tensor& x) {
        return layer->forward(x, cos_BLD, sin_BLD, pattern, la, i);
      };
      x_BLH = CheckpointLayer::apply(x_BLH, fn);
    } else {
      x_BLH = layer->forward(x_BLH, cos_BLD, sin_BLD, pattern, a, i);
    }
  }
  return a.train_fused ? train::rms_norm(x_BLH, norm_->weight, norm_->eps) : norm_(x_BLH);
}

torch::Tensor TransformerImpl::logits_from_hidden(const torch::Tensor& h) { return torch::linear(h, lm_head_weight_); }

torch::Tensor TransformerImpl::forward(const ForwardArgs& a) {
  auto h_BLH = hidden(a);
  if (!a.logits_at.defined()) return logits_from_hidden(h_BLH);
  DICE_REQUIRE(a.logits_at.dim() == 1, "logits_at must be a 1-D list of flat positions; got ", a.logits_at.sizes(), ".");
  auto h_NH = h_BLH.reshape({-1, cfg_.hidden_size}).index_select(0, a.logits_at.to(h_BLH.device(), torch::kInt64));
  return logits_from_hidden(h_NH);
}

Transformer load_hf_model(const std::string& dir, torch::Dtype dtype, torch::Device device) {
  Transformer m(ModelConfig::from_hf_dir(dir), dtype, device);
  m->load_weights(load_safetensors(dir));
  return m;
}

}  // namespace dice::model
