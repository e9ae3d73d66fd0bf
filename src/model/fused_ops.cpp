// Fused inference operators: argument checks, then our CUDA kernels (fused_kernels.cu) for CUDA
// tensors in a build that has them, else the same arithmetic as PyTorch ops.
#include "dice/model/fused_ops.h"

#include <torch/torch.h>

#include <atomic>
#include <cstdint>

#include "dice/model/attention.h"
#include "dice/model/masks.h"
#include "dice/util/error.h"

#ifndef DICE_WITH_FUSED_KERNELS  // set by src/model/CMakeLists.txt when it compiles fused_kernels.cu
#define DICE_WITH_FUSED_KERNELS 0
#endif

#if DICE_WITH_FUSED_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "fused_kernels.h"
#endif

namespace dice::model::fused {

namespace {

std::atomic<bool> decode_kernel_on{true};  // enable_decode_attention_kernel

void check_weight(const torch::Tensor& x, const torch::Tensor& w, const char* what) {
  DICE_REQUIRE(w.dim() == 1 && w.size(0) == x.size(-1), what, " weight must be [", x.size(-1), "]; got ", w.sizes(), ".");
  DICE_REQUIRE(w.scalar_type() == x.scalar_type() && w.device() == x.device(), what, " weight is ", w.scalar_type(),
               " on ", w.device(), " but its input is ", x.scalar_type(), " on ", x.device(), ".");
}

#if DICE_WITH_FUSED_KERNELS
bool on_kernels(const torch::Tensor& x) { return x.is_cuda(); }

int dtype_code(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat32: return 0;
    case torch::kBFloat16: return 1;
    case torch::kFloat16: return 2;
    default: throw Error(str("The fused kernels take fp32, bf16 or fp16 tensors; got ", x.scalar_type(), "."));
  }
}

void check_launch(int rc, const char* kernel) {  // a failed launch is a broken invariant: fatal
  if (rc != 0) fatal(kernel, __FILE__, __LINE__, cudaGetErrorString(static_cast<cudaError_t>(rc)));
}

void* stream_of(const torch::Tensor& x) { return c10::cuda::getCurrentCUDAStream(x.device().index()).stream(); }

// The vectorised kernels move 16 bytes at a time: rows of `n` elements and the base must allow it.
bool vec_ok(const torch::Tensor& t, int64_t n) {
  return (n * static_cast<int64_t>(t.element_size())) % 16 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}
#endif

}  // namespace

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(torch::kFloat32);
  auto var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * torch::rsqrt(var + eps)).to(x.scalar_type());
}

torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& signed_sin) {
  const int64_t half = x.size(-1) / 2;
  return x * cos + torch::cat({x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * signed_sin;
}

bool have_cuda_kernels() { return DICE_WITH_FUSED_KERNELS != 0; }

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  check_weight(x, w, "RMSNorm");
#if DICE_WITH_FUSED_KERNELS
  if (on_kernels(x) && vec_ok(x, x.size(-1)) && vec_ok(w, x.size(-1))) {
    c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t H = x.size(-1);
    check_launch(cuda::rms_norm(dtype_code(x), xc.data_ptr(), H, nullptr, 0, w.data_ptr(), y.data_ptr(), xc.numel() / H,
                                H, static_cast<float>(eps), stream_of(x)),
                 "rms_norm");
    return y;
  }
#endif
  return rms_norm_reference(x, w, eps);
}

torch::Tensor add_rms_norm_(torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w, double eps) {
  DICE_REQUIRE(x.is_contiguous(), "add_rms_norm_ updates the residual in place; it must be contiguous.");
  DICE_REQUIRE(delta.sizes() == x.sizes() && delta.scalar_type() == x.scalar_type(), "The residual update is ",
               delta.sizes(), " ", delta.scalar_type(), " but the residual is ", x.sizes(), " ", x.scalar_type(), ".");
  check_weight(x, w, "RMSNorm");
#if DICE_WITH_FUSED_KERNELS
  auto dc = delta.contiguous();
  if (on_kernels(x) && vec_ok(x, x.size(-1)) && vec_ok(dc, x.size(-1)) && vec_ok(w, x.size(-1))) {
    c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const int64_t H = x.size(-1);
    check_launch(cuda::rms_norm(dtype_code(x), x.data_ptr(), H, dc.data_ptr(), H, w.data_ptr(), y.data_ptr(),
                                x.numel() / H, H, static_cast<float>(eps), stream_of(x)),
                 "add_rms_norm");
    return y;
  }
#endif
  x.add_(delta);
  return rms_norm_reference(x, w, eps);
}

torch::Tensor qk_norm_rope_scatter(const torch::Tensor& qkv_BLN, const torch::Tensor& qw, const torch::Tensor& kw,
                                   double eps, const torch::Tensor& cos_BLD, const torch::Tensor& sin_BLD,
                                   const torch::Tensor& slots_BL, torch::Tensor& k_dst, torch::Tensor& v_dst,
                                   int64_t hq, int64_t hkv) {
  DICE_REQUIRE(qkv_BLN.dim() == 3, "The packed q|k|v projection must be [B, L, N]; got ", qkv_BLN.sizes(), ".");
  const int64_t B = qkv_BLN.size(0), L = qkv_BLN.size(1);
  DICE_REQUIRE(hq > 0 && hkv > 0 && qkv_BLN.size(2) % (hq + 2 * hkv) == 0, "The packed projection's width ",
               qkv_BLN.size(2), " is not a multiple of ", hq + 2 * hkv, " heads.");
  const int64_t D = qkv_BLN.size(2) / (hq + 2 * hkv);
  DICE_REQUIRE(D % 2 == 0, "RoPE needs an even head_dim; got ", D, ".");
  DICE_REQUIRE(cos_BLD.sizes() == torch::IntArrayRef({B, L, D}) && sin_BLD.sizes() == cos_BLD.sizes(),
               "RoPE tables must be [", B, ", ", L, ", ", D, "]; got ", cos_BLD.sizes(), " and ", sin_BLD.sizes(), ".");
  DICE_REQUIRE(slots_BL.sizes() == torch::IntArrayRef({B, L}) && slots_BL.scalar_type() == torch::kInt64,
               "Cache slots must be int64 [", B, ", ", L, "]; got ", slots_BL.scalar_type(), " ", slots_BL.sizes(), ".");
  for (const auto* dst : {&k_dst, &v_dst}) {
    DICE_REQUIRE(dst->dim() == 4 && dst->size(0) == B && dst->size(1) == hkv && dst->size(3) == D && dst->stride(3) == 1 &&
                     dst->scalar_type() == qkv_BLN.scalar_type() && dst->device() == qkv_BLN.device(),
                 "K/V destinations must be ", qkv_BLN.scalar_type(), " [", B, ", ", hkv, ", S, ", D, "] on ",
                 qkv_BLN.device(), "; got ", dst->scalar_type(), " ", dst->sizes(), " on ", dst->device(), ".");
  }
  check_weight(qkv_BLN.narrow(2, 0, D), qw, "q_norm");
  check_weight(qkv_BLN.narrow(2, 0, D), kw, "k_norm");
#if DICE_WITH_FUSED_KERNELS
  if (on_kernels(qkv_BLN)) {
    c10::cuda::CUDAGuard guard(qkv_BLN.device());
    auto qkv = qkv_BLN.contiguous();
    auto cos = cos_BLD.to(qkv.scalar_type()).contiguous(), sin = sin_BLD.to(qkv.scalar_type()).contiguous();
    auto slots = slots_BL.to(qkv.device()).contiguous();
    auto q = torch::empty({B, hq, L, D}, qkv.options());
    const int64_t ks[3] = {k_dst.stride(0), k_dst.stride(1), k_dst.stride(2)};
    const int64_t vs[3] = {v_dst.stride(0), v_dst.stride(1), v_dst.stride(2)};
    check_launch(cuda::qk_norm_rope_scatter(dtype_code(qkv), qkv.data_ptr(), qkv.size(2), qw.data_ptr(), kw.data_ptr(),
                                            static_cast<float>(eps), cos.data_ptr(), sin.data_ptr(),
                                            slots.data_ptr<int64_t>(), q.data_ptr(), k_dst.data_ptr(), ks,
                                            v_dst.data_ptr(), vs, B, L, hq, hkv, D, stream_of(qkv)),
                 "qk_norm_rope_scatter");
    return q;
  }
#endif
  auto heads = qkv_BLN.view({B, L, hq + 2 * hkv, D});
  auto cos = cos_BLD.unsqueeze(2), sin = sin_BLD.unsqueeze(2);
  auto q = rms_norm_reference(heads.narrow(2, 0, hq), qw, eps);
  auto k = rms_norm_reference(heads.narrow(2, hq, hkv), kw, eps);
  q = rope_reference(q, cos, sin);
  k = rope_reference(k, cos, sin);
  auto idx = slots_BL.to(k_dst.device()).reshape({B, 1, L, 1}).expand({B, hkv, L, D});
  k_dst.scatter_(2, idx, k.transpose(1, 2));
  v_dst.scatter_(2, idx, heads.narrow(2, hq + hkv, hkv).transpose(1, 2));
  return q.transpose(1, 2).contiguous();
}

torch::Tensor silu_mul(const torch::Tensor& gu) {
  DICE_REQUIRE(gu.dim() >= 1 && gu.size(-1) % 2 == 0, "silu_mul takes [..., 2F]; got ", gu.sizes(), ".");
  const int64_t F = gu.size(-1) / 2;
#if DICE_WITH_FUSED_KERNELS
  auto g = gu.contiguous();
  if (on_kernels(g) && vec_ok(g, F)) {
    c10::cuda::CUDAGuard guard(g.device());
    auto sizes = g.sizes().vec();
    sizes.back() = F;
    auto out = torch::empty(sizes, g.options());
    check_launch(cuda::silu_mul(dtype_code(g), g.data_ptr(), 2 * F, out.data_ptr(), g.numel() / (2 * F), F, stream_of(g)),
                 "silu_mul");
    return out;
  }
#endif
  return torch::silu(gu.narrow(-1, 0, F)) * gu.narrow(-1, F, F);
}

void enable_decode_attention_kernel(bool on) { decode_kernel_on = on; }

torch::Tensor decode_attention(const torch::Tensor& q_BHLD, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                               const torch::Tensor& kv_lengths_B, int64_t K, double scale) {
  DICE_REQUIRE(q_BHLD.dim() == 4 && k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes(),
               "decode_attention takes q [B, Hq, L, D] and a K/V cache [B, Hkv, S, D]; got ", q_BHLD.sizes(), ", ",
               k_cache.sizes(), " and ", v_cache.sizes(), ".");
  const int64_t B = q_BHLD.size(0), Hq = q_BHLD.size(1), L = q_BHLD.size(2), D = q_BHLD.size(3);
  const int64_t Hkv = k_cache.size(1);
  DICE_REQUIRE(k_cache.size(0) == B && k_cache.size(3) == D && Hkv > 0 && Hq % Hkv == 0 && K > 0 && K <= k_cache.size(2),
               "decode_attention: the cache ", k_cache.sizes(), " does not fit q ", q_BHLD.sizes(), " and K ", K, ".");
  DICE_REQUIRE(!kv_lengths_B.defined() || (kv_lengths_B.dim() == 1 && kv_lengths_B.size(0) == B),
               "decode_attention: kv_lengths must be [", B, "]; got ", kv_lengths_B.sizes(), ".");
#if DICE_WITH_FUSED_KERNELS
  const auto st = q_BHLD.scalar_type();
  auto cache_ok = [&](const torch::Tensor& c) {
    return c.scalar_type() == st && c.stride(3) == 1 && vec_ok(c, D) && (c.stride(0) * c.element_size()) % 16 == 0 &&
           (c.stride(1) * c.element_size()) % 16 == 0 && (c.stride(2) * c.element_size()) % 16 == 0;
  };
  if (decode_kernel_on && on_kernels(q_BHLD) && (st == torch::kBFloat16 || st == torch::kFloat16) && (D == 64 || D == 128) &&
      (Hq / Hkv) * L <= 16 && cache_ok(k_cache) && cache_ok(v_cache)) {
    c10::cuda::CUDAGuard guard(q_BHLD.device());
    static int sms[64] = {0};
    const int dev = q_BHLD.device().index();
    if (dev < 64 && sms[dev] == 0) cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
    const int splits = cuda::decode_attention_splits(B, Hkv, K, dev < 64 && sms[dev] > 0 ? sms[dev] : 132);
    auto q = q_BHLD.contiguous();
    auto out = torch::empty({B, L, Hq * D}, q.options());
    torch::Tensor part_o, part_ml, lengths;
    if (splits > 1) {
      part_o = torch::empty({splits, B, Hkv, 16, D}, q.options().dtype(torch::kFloat32));
      part_ml = torch::empty({splits, B, Hkv, 16, 2}, q.options().dtype(torch::kFloat32));
    }
    if (kv_lengths_B.defined()) lengths = kv_lengths_B.to(q.device(), torch::kInt64).contiguous();
    const int64_t ks[3] = {k_cache.stride(0), k_cache.stride(1), k_cache.stride(2)};
    const int64_t vs[3] = {v_cache.stride(0), v_cache.stride(1), v_cache.stride(2)};
    check_launch(cuda::decode_attention(dtype_code(q), q.data_ptr(), k_cache.data_ptr(), ks, v_cache.data_ptr(), vs,
                                        lengths.defined() ? lengths.data_ptr<int64_t>() : nullptr, K, B, Hq, Hkv, L, D,
                                        static_cast<float>(scale), splits, out.data_ptr(),
                                        splits > 1 ? part_o.data_ptr<float>() : nullptr,
                                        splits > 1 ? part_ml.data_ptr<float>() : nullptr, stream_of(q)),
                 "decode_attention");
    return out;
  }
#endif
  torch::Tensor mask;
  if (kv_lengths_B.defined()) mask = key_length_mask(kv_lengths_B.to(q_BHLD.device()), L, K);
  auto o = sdpa_gqa(q_BHLD, k_cache.narrow(2, 0, K), v_cache.narrow(2, 0, K),
                    prepare_attention_mask(mask, Hq / Hkv, q_BHLD.scalar_type()), scale);
  return o.transpose(1, 2).reshape({B, L, Hq * D});
}

std::pair<torch::Tensor, torch::Tensor> sample_rows(const torch::Tensor& logits_NV, const torch::Tensor& uniform_N,
                                                    double temperature) {
  DICE_REQUIRE(logits_NV.dim() == 2 && logits_NV.size(1) > 0, "sample_rows takes logits [N, V]; got ",
               logits_NV.sizes(), ".");
  DICE_REQUIRE(uniform_N.dim() == 1 && uniform_N.size(0) == logits_NV.size(0), "sample_rows needs one uniform per row (",
               logits_NV.size(0), "); got ", uniform_N.sizes(), ".");
  DICE_REQUIRE(temperature > 0, "sample_rows needs a positive temperature; got ", temperature, ".");
#if DICE_WITH_FUSED_KERNELS
  const int64_t N = logits_NV.size(0), V = logits_NV.size(1);
  if (on_kernels(logits_NV) && logits_NV.stride(1) == 1 && V < (int64_t{1} << 31)) {
    c10::cuda::CUDAGuard guard(logits_NV.device());
    auto u = uniform_N.to(logits_NV.device(), torch::kFloat64).contiguous();
    auto tokens = torch::empty({N}, logits_NV.options().dtype(torch::kInt64));
    auto probs = torch::empty({N}, logits_NV.options().dtype(torch::kFloat32));
    check_launch(cuda::sample_rows(dtype_code(logits_NV), logits_NV.data_ptr(), logits_NV.stride(0), N, V,
                                   u.data_ptr<double>(), static_cast<float>(temperature), tokens.data_ptr<int64_t>(),
                                   probs.data_ptr<float>(), stream_of(logits_NV)),
                 "sample_rows");
    return {tokens, probs};
  }
#endif
  return sample_rows_reference(logits_NV, uniform_N, temperature);
}

std::pair<torch::Tensor, torch::Tensor> sample_rows_reference(const torch::Tensor& logits_NV,
                                                              const torch::Tensor& uniform_N, double temperature) {
  const int64_t V = logits_NV.size(1);
  auto scaled = logits_NV.to(torch::kFloat32);
  if (temperature != 1.0) scaled = scaled / temperature;
  auto probs = scaled.softmax(-1);
  auto cdf = probs.cumsum(-1);
  auto target = uniform_N.to(cdf.device(), torch::kFloat32).unsqueeze(-1) * cdf.narrow(-1, V - 1, 1);
  auto j = torch::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).clamp_max(V - 1);
  return {j.squeeze(-1), probs.gather(-1, j).squeeze(-1)};
}

}  // namespace dice::model::fused
