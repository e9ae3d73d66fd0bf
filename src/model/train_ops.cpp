// The learner's fused training operators (train_ops.h): autograd functions whose forward is the
// inference kernel (fused_ops.h) and whose backward is ours (train_kernels.cu) on CUDA bf16 / fp16;
// the composite PyTorch ops elsewhere.
#include "dice/model/train_ops.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <cstdint>

#include "dice/model/fused_ops.h"
#include "dice/util/error.h"

#ifndef DICE_WITH_FUSED_KERNELS  // set by src/model/CMakeLists.txt when it compiles the .cu files
#define DICE_WITH_FUSED_KERNELS 0
#endif

#if DICE_WITH_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "train_kernels.h"
#endif

namespace dice::model::train {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool on_kernels(const torch::Tensor& x) {
#if DICE_WITH_FUSED_KERNELS
  return x.is_cuda() && (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat16);
#else
  (void)x;
  return false;
#endif
}

namespace {

#if DICE_WITH_FUSED_KERNELS
int dtype_code(const torch::Tensor& x) { return x.scalar_type() == torch::kBFloat16 ? 1 : 2; }
void* stream_of(const torch::Tensor& x) { return at::cuda::getCurrentCUDAStream(x.device().index()).stream(); }
int sms_of(const torch::Tensor& x) { return at::cuda::getDeviceProperties(x.device().index())->multiProcessorCount; }
// Contiguous on a 16-byte boundary (the kernels move 16 bytes at a time): t itself or a copy.
torch::Tensor aligned(const torch::Tensor& t) {
  auto c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
}
void check_launch(int rc, const char* kernel) {  // a failed launch is a broken invariant: fatal
  if (rc != 0) fatal(kernel, __FILE__, __LINE__, cudaGetErrorString(static_cast<cudaError_t>(rc)));
}

class RmsNormFn : public torch::autograd::Function<RmsNormFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w, double eps) {
    auto xc = aligned(x);
    ctx->save_for_backward({xc, w});
    ctx->saved_data["eps"] = eps;
    return fused::rms_norm(xc, w, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const double eps = ctx->saved_data["eps"].toDouble();
    c10::cuda::CUDAGuard guard(x.device());
    auto dy = aligned(grads[0].to(x.scalar_type()));
    const int64_t H = x.size(-1), T = x.numel() / H;
    const int warps = cuda::norm_backward_warps(T, sms_of(x));
    auto dx = torch::empty_like(x);
    auto part = torch::empty({warps, H}, x.options().dtype(torch::kFloat32));
    check_launch(cuda::rms_norm_backward(dtype_code(x), x.data_ptr(), w.data_ptr(), dy.data_ptr(),
                                         static_cast<float>(eps), dx.data_ptr(), part.data_ptr<float>(), T, H, warps,
                                         stream_of(x)),
                 "rms_norm_backward");
    return {dx, part.sum(0).to(w.scalar_type()), torch::Tensor()};
  }
};

class QkNormRopeFn : public torch::autograd::Function<QkNormRopeFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& qkv_BLN, const torch::Tensor& qw,
                               const torch::Tensor& kw, double eps, const torch::Tensor& cos_BLD,
                               const torch::Tensor& sin_BLD, int64_t hq, int64_t hkv) {
    const int64_t B = qkv_BLN.size(0), L = qkv_BLN.size(1), D = qkv_BLN.size(2) / (hq + 2 * hkv);
    auto qkv = qkv_BLN.contiguous();
    auto cos = cos_BLD.to(qkv.scalar_type()).contiguous(), sin = sin_BLD.to(qkv.scalar_type()).contiguous();
    auto slots = torch::arange(L, qkv.options().dtype(torch::kInt64)).expand({B, L}).contiguous();
    auto k = torch::empty({B, hkv, L, D}, qkv.options()), v = torch::empty({B, hkv, L, D}, qkv.options());
    auto q = fused::qk_norm_rope_scatter(qkv, qw, kw, eps, cos, sin, slots, k, v, hq, hkv);
    ctx->save_for_backward({qkv, qw, kw, cos, sin});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["hq"] = hq;
    ctx->saved_data["hkv"] = hkv;
    return {q, k, v};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &qkv = saved[0], &qw = saved[1], &kw = saved[2], &cos = saved[3], &sin = saved[4];
    const double eps = ctx->saved_data["eps"].toDouble();
    const int64_t hq = ctx->saved_data["hq"].toInt(), hkv = ctx->saved_data["hkv"].toInt();
    const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / (hq + 2 * hkv);
    c10::cuda::CUDAGuard guard(qkv.device());
    auto grad = [&](size_t i, int64_t heads) {
      return grads[i].defined() ? grads[i].to(qkv.scalar_type()).contiguous() : torch::zeros({B, heads, L, D}, qkv.options());
    };
    auto dq = grad(0, hq), dk = grad(1, hkv), dv = grad(2, hkv);
    const int warps = cuda::norm_backward_warps(B * L * (hq + 2 * hkv), sms_of(qkv));
    auto dqkv = torch::empty_like(qkv);
    auto part = torch::empty({warps, 2, D}, qkv.options().dtype(torch::kFloat32));
    check_launch(cuda::qk_norm_rope_backward(dtype_code(qkv), qkv.data_ptr(), qw.data_ptr(), kw.data_ptr(),
                                             static_cast<float>(eps), cos.data_ptr(), sin.data_ptr(), dq.data_ptr(),
                                             dk.data_ptr(), dv.data_ptr(), dqkv.data_ptr(), part.data_ptr<float>(), B, L,
                                             hq, hkv, D, warps, stream_of(qkv)),
                 "qk_norm_rope_backward");
    auto dw = part.sum(0).to(qw.scalar_type());
    return {dqkv, dw[0], dw[1], torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class SiluMulFn : public torch::autograd::Function<SiluMulFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gu) {
    auto g = aligned(gu);
    ctx->save_for_backward({g});
    return fused::silu_mul(g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto gu = ctx->get_saved_variables()[0];
    c10::cuda::CUDAGuard guard(gu.device());
    const int64_t F = gu.size(-1) / 2, T = gu.numel() / (2 * F);
    auto dout = aligned(grads[0].to(gu.scalar_type()));
    auto dgu = torch::empty_like(gu);
    check_launch(cuda::silu_mul_backward(dtype_code(gu), gu.data_ptr(), dout.data_ptr(), dgu.data_ptr(), T, F,
                                         stream_of(gu)),
                 "silu_mul_backward");
    return {dgu};
  }
};
#endif

// Gathers along dim 1, one output per index tensor; the indices are read through a pointer in
// forward and saved for backward.
class GatherRowsFn : public torch::autograd::Function<GatherRowsFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& src, int64_t indices_ptr) {
    const auto& indices = *reinterpret_cast<const std::vector<torch::Tensor>*>(indices_ptr);
    variable_list out;
    out.reserve(indices.size());
    for (const auto& idx : indices) out.push_back(src.index_select(1, idx));
    ctx->save_for_backward(indices);
    ctx->saved_data["sizes"] = src.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(src.scalar_type());
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto indices = ctx->get_saved_variables();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto acc_dtype = dtype == torch::kBFloat16 || dtype == torch::kHalf ? torch::kFloat32 : dtype;
    torch::Tensor acc;
    for (size_t i = 0; i < indices.size() && i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (!acc.defined()) acc = torch::zeros(sizes, grads[i].options().dtype(acc_dtype));
      acc.index_add_(1, indices[i], grads[i].to(acc_dtype));
    }
    return {acc.defined() ? acc.to(dtype) : torch::Tensor(), torch::Tensor()};
  }
};

// y = x packed^T; the parts are inputs so autograd hands each its rows of the weight gradient.
// (Two classes, not an undefined third input: torch 1.13 asks every input for its device.)
torch::Tensor packed_forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& packed,
                             std::initializer_list<int64_t> rows) {
  ctx->save_for_backward({x, packed});
  std::vector<int64_t> n(rows);
  ctx->saved_data["rows"] = n;
  return torch::linear(x, packed);
}
variable_list packed_backward(AutogradContext* ctx, const variable_list& grads) {
  auto saved = ctx->get_saved_variables();
  const auto &x = saved[0], &packed = saved[1];
  const auto rows = ctx->saved_data["rows"].toIntVector();
  const int64_t H = x.size(-1), N = packed.size(0);
  auto dy = grads[0].reshape({-1, N});
  variable_list out = {torch::Tensor(), torch::Tensor()};
  if (ctx->needs_input_grad(0)) out[0] = torch::matmul(dy, packed).view(x.sizes());
  bool any = false;
  for (size_t i = 0; i < rows.size(); ++i) any = any || ctx->needs_input_grad(2 + i);
  torch::Tensor dw = any ? torch::matmul(dy.t(), x.reshape({-1, H})) : torch::Tensor();
  int64_t at = 0;
  for (auto n : rows) {
    out.push_back(dw.defined() ? dw.narrow(0, at, n) : torch::Tensor());
    at += n;
  }
  return out;
}

class PackedLinear2Fn : public torch::autograd::Function<PackedLinear2Fn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& packed,
                               const torch::Tensor& p0, const torch::Tensor& p1) {
    return packed_forward(ctx, x, packed, {p0.size(0), p1.size(0)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return packed_backward(ctx, grads); }
};

class PackedLinear3Fn : public torch::autograd::Function<PackedLinear3Fn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& packed,
                               const torch::Tensor& p0, const torch::Tensor& p1, const torch::Tensor& p2) {
    return packed_forward(ctx, x, packed, {p0.size(0), p1.size(0), p2.size(0)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return packed_backward(ctx, grads); }
};

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  RECORD_USER_SCOPE("dice::fused_ops");  // bench learner --parts
#if DICE_WITH_FUSED_KERNELS
  const int64_t H = x.size(-1);
  if (on_kernels(x) && w.scalar_type() == x.scalar_type() && w.dim() == 1 && w.size(0) == H && H % 8 == 0 &&
      H <= 4096 && w.is_contiguous() && reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0)
    return RmsNormFn::apply(x, w, eps);
#endif
  return fused::rms_norm_reference(x, w, eps);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qk_norm_rope(const torch::Tensor& qkv_BLN,
                                                                     const torch::Tensor& qw, const torch::Tensor& kw,
                                                                     double eps, const torch::Tensor& cos_BLD,
                                                                     const torch::Tensor& sin_BLD, int64_t hq,
                                                                     int64_t hkv) {
  RECORD_USER_SCOPE("dice::fused_ops");  // bench learner --parts
  DICE_REQUIRE(qkv_BLN.dim() == 3 && hq > 0 && hkv > 0 && qkv_BLN.size(2) % (hq + 2 * hkv) == 0,
               "The packed q|k|v projection must be [B, L, (hq + 2 hkv) D]; got ", qkv_BLN.sizes(), " for ", hq,
               " + 2 x ", hkv, " heads.");
  const int64_t B = qkv_BLN.size(0), L = qkv_BLN.size(1), D = qkv_BLN.size(2) / (hq + 2 * hkv);
#if DICE_WITH_FUSED_KERNELS
  if (on_kernels(qkv_BLN) && (D == 64 || D == 128) && qw.scalar_type() == qkv_BLN.scalar_type() &&
      kw.scalar_type() == qkv_BLN.scalar_type() && qw.is_contiguous() && kw.is_contiguous()) {
    auto out = QkNormRopeFn::apply(qkv_BLN, qw, kw, eps, cos_BLD, sin_BLD, hq, hkv);
    return {out[0], out[1], out[2]};
  }
#endif
  auto heads = qkv_BLN.view({B, L, hq + 2 * hkv, D});
  auto cos = cos_BLD.unsqueeze(1), sin = sin_BLD.unsqueeze(1);
  auto q = fused::rms_norm_reference(heads.narrow(2, 0, hq), qw, eps).transpose(1, 2);
  auto k = fused::rms_norm_reference(heads.narrow(2, hq, hkv), kw, eps).transpose(1, 2);
  return {fused::rope_reference(q, cos, sin), fused::rope_reference(k, cos, sin),
          heads.narrow(2, hq + hkv, hkv).transpose(1, 2)};
}

torch::Tensor silu_mul(const torch::Tensor& gu) {
  RECORD_USER_SCOPE("dice::fused_ops");  // bench learner --parts
  DICE_REQUIRE(gu.dim() >= 1 && gu.size(-1) % 2 == 0, "silu_mul takes [..., 2F]; got ", gu.sizes(), ".");
  const int64_t F = gu.size(-1) / 2;
#if DICE_WITH_FUSED_KERNELS
  if (on_kernels(gu) && F % 8 == 0) return SiluMulFn::apply(gu);
#endif
  return torch::silu(gu.narrow(-1, 0, F)) * gu.narrow(-1, F, F);
}

std::vector<torch::Tensor> gather_rows(const torch::Tensor& src, const std::vector<torch::Tensor>& indices) {
  DICE_REQUIRE(src.dim() == 3, "gather_rows takes src [A, N, C]; got ", src.sizes(), ".");
  if (indices.empty()) return {};
  return GatherRowsFn::apply(src, reinterpret_cast<int64_t>(&indices));
}

torch::Tensor packed_linear(const torch::Tensor& x, const torch::Tensor& packed,
                            std::initializer_list<torch::Tensor> parts) {
  RECORD_USER_SCOPE("dice::gemm");  // bench learner --parts: the backward node too
  DICE_REQUIRE(parts.size() == 2 || parts.size() == 3, "packed_linear takes 2 or 3 parts; got ", parts.size(), ".");
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.size(0);
  DICE_REQUIRE(packed.dim() == 2 && rows == packed.size(0) && packed.size(1) == x.size(-1),
               "packed_linear: the packed weight ", packed.sizes(), " does not hold parts of ", rows, " rows of ",
               x.size(-1), ".");
  const auto* p = parts.begin();
  if (parts.size() == 2) return PackedLinear2Fn::apply(x, packed, p[0], p[1]);
  return PackedLinear3Fn::apply(x, packed, p[0], p[1], p[2]);
}

}  // namespace dice::model::train
