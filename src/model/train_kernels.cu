// The learner's backward kernels (see train_kernels.h): RMSNorm, q/k norm + RoPE, SwiGLU.
//
// Each is the derivative of the forward as the inference kernels compute it (fused_kernels.cu:
// values rounded to the data type where HF's eager code rounds), taken in fp32 without
// intermediate rounding; only the outputs are rounded. Weight gradients are fp32 sums per warp
// (over the rows that warp took) that the caller adds up, so no atomics and a fixed order.
#include "train_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace dice::model::train::cuda {

namespace {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f(from_f<T>(v)); }

template <typename T>
struct alignas(16) Vec {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kWarpsPerBlock = 8;

// A warp per row; lane l owns the 16-byte vectors l, l + 32, ... (at most kNpl of them), and
// sums dy * round(x * r) for its columns over every row the warp takes.
template <typename T, int kNpl>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    rms_norm_bwd_kernel(const T* x, const T* w, const T* dy, float eps, T* dx, float* dw_part, int64_t rows, int H) {
  using V = Vec<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int nv = H / V::kN;
  const V* wr = reinterpret_cast<const V*>(w);
  float acc[kNpl][V::kN];
#pragma unroll
  for (int p = 0; p < kNpl; ++p)
#pragma unroll
    for (int e = 0; e < V::kN; ++e) acc[p][e] = 0.f;
  const float inv_h = 1.f / static_cast<float>(H);
  for (int64_t t = warp; t < rows; t += warps) {
    const V* xr = reinterpret_cast<const V*>(x + t * H);
    const V* gr = reinterpret_cast<const V*>(dy + t * H);
    float ss = 0.f, dot = 0.f;
#pragma unroll
    for (int p = 0; p < kNpl; ++p) {
      const int i = lane + 32 * p;
      if (i >= nv) break;
      const V a = xr[i], g = gr[i], ww = wr[i];
#pragma unroll
      for (int e = 0; e < V::kN; ++e) {
        const float xf = to_f(a.v[e]);
        ss += xf * xf;
        dot += to_f(g.v[e]) * to_f(ww.v[e]) * xf;
      }
    }
    ss = warp_sum(ss);
    dot = warp_sum(dot);
    const float r = rsqrtf(ss * inv_h + eps), c = r * r * r * dot * inv_h;
    V* dr = reinterpret_cast<V*>(dx + t * H);
#pragma unroll
    for (int p = 0; p < kNpl; ++p) {
      const int i = lane + 32 * p;
      if (i >= nv) break;
      const V a = xr[i], g = gr[i], ww = wr[i];
      V o;
#pragma unroll
      for (int e = 0; e < V::kN; ++e) {
        const float xf = to_f(a.v[e]), gf = to_f(g.v[e]);
        o.v[e] = from_f<T>(r * gf * to_f(ww.v[e]) - c * xf);
        acc[p][e] += gf * round_to<T>(xf * r);
      }
      dr[i] = o;
    }
  }
  float* part = dw_part + warp * H;
#pragma unroll
  for (int p = 0; p < kNpl; ++p) {
    const int i = lane + 32 * p;
    if (i >= nv) break;
#pragma unroll
    for (int e = 0; e < V::kN; ++e) part[i * V::kN + e] = acc[p][e];
  }
}

// A warp per (token, head); lane l owns the RoPE pairs (j, j + D/2), j = l, l + 32 (D <= 128).
constexpr int kMaxPairs = 2;
template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    qk_bwd_kernel(const T* qkv, const T* qw, const T* kw, float eps, const T* cos, const T* sin, const T* dq,
                  const T* dk, const T* dv, T* dqkv, float* dw_part, int L, int hq, int hkv, int D, int64_t tokens) {
  const int lane = threadIdx.x & 31, half = D / 2, heads = hq + 2 * hkv;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t N = static_cast<int64_t>(heads) * D, items = tokens * heads;
  float aq[kMaxPairs][2], ak[kMaxPairs][2];
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) aq[p][0] = aq[p][1] = ak[p][0] = ak[p][1] = 0.f;
  const float inv_d = 1.f / static_cast<float>(D);
  for (int64_t it = warp; it < items; it += warps) {
    const int64_t t = it / heads;
    const int h = static_cast<int>(it % heads);
    const int64_t b = t / L, l = t % L;
    const T* src = qkv + t * N + static_cast<int64_t>(h) * D;
    T* dst = dqkv + t * N + static_cast<int64_t>(h) * D;
    if (h >= hq + hkv) {  // value head: its gradient is copied back
      const T* g = dv + ((b * hkv + (h - hq - hkv)) * L + l) * D;
      for (int j = lane; j < D; j += 32) dst[j] = g[j];
      continue;
    }
    const bool is_q = h < hq;
    const T* g = is_q ? dq + ((b * hq + h) * L + l) * D : dk + ((b * hkv + (h - hq)) * L + l) * D;
    const T* nw = is_q ? qw : kw;
    const T* c = cos + t * D;
    const T* s = sin + t * D;
    float x1[kMaxPairs], x2[kMaxPairs], ss = 0.f;
#pragma unroll
    for (int p = 0; p < kMaxPairs; ++p) {
      const int j = lane + 32 * p;
      x1[p] = j < half ? to_f(src[j]) : 0.f;
      x2[p] = j < half ? to_f(src[j + half]) : 0.f;
      ss += x1[p] * x1[p] + x2[p] * x2[p];
    }
    const float r = rsqrtf(warp_sum(ss) * inv_d + eps);
    float gx1[kMaxPairs], gx2[kMaxPairs], dot = 0.f;
#pragma unroll
    for (int p = 0; p < kMaxPairs; ++p) {
      const int j = lane + 32 * p;
      gx1[p] = gx2[p] = 0.f;
      if (j >= half) continue;
      // y1 = n1 c1 + n2 s1, y2 = n2 c2 + n1 s2 (s with its first half negated)
      const float g1 = to_f(g[j]), g2 = to_f(g[j + half]);
      const float dn1 = g1 * to_f(c[j]) + g2 * to_f(s[j + half]);
      const float dn2 = g2 * to_f(c[j + half]) + g1 * to_f(s[j]);
      const float w1 = to_f(nw[j]), w2 = to_f(nw[j + half]);
      const float xr1 = round_to<T>(x1[p] * r), xr2 = round_to<T>(x2[p] * r);
      if (is_q) {
        aq[p][0] += dn1 * xr1;
        aq[p][1] += dn2 * xr2;
      } else {
        ak[p][0] += dn1 * xr1;
        ak[p][1] += dn2 * xr2;
      }
      gx1[p] = dn1 * w1;
      gx2[p] = dn2 * w2;
      dot += gx1[p] * x1[p] + gx2[p] * x2[p];
    }
    const float cc = r * r * r * warp_sum(dot) * inv_d;
#pragma unroll
    for (int p = 0; p < kMaxPairs; ++p) {
      const int j = lane + 32 * p;
      if (j >= half) continue;
      dst[j] = from_f<T>(r * gx1[p] - cc * x1[p]);
      dst[j + half] = from_f<T>(r * gx2[p] - cc * x2[p]);
    }
  }
  float* part = dw_part + warp * 2 * D;
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
    const int j = lane + 32 * p;
    if (j >= half) continue;
    part[j] = aq[p][0];
    part[j + half] = aq[p][1];
    part[D + j] = ak[p][0];
    part[D + j + half] = ak[p][1];
  }
}

// Thread i owns one 16-byte vector of the output gradient (F % Vec<T>::kN == 0).
template <typename T>
__global__ void silu_mul_bwd_kernel(const T* gu, const T* dout, T* dgu, int64_t rows, int64_t F) {
  using V = Vec<T>;
  const int64_t fv = F / V::kN, n = rows * fv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / fv, f = i % fv;
    const V* row = reinterpret_cast<const V*>(gu + t * 2 * F);
    const V g = row[f], u = row[fv + f], d = reinterpret_cast<const V*>(dout)[i];
    V da, du;
#pragma unroll
    for (int e = 0; e < V::kN; ++e) {
      const float a = to_f(g.v[e]), df = to_f(d.v[e]);
      const float sg = 1.f / (1.f + expf(-a));
      du.v[e] = from_f<T>(df * round_to<T>(a * sg));
      da.v[e] = from_f<T>(df * to_f(u.v[e]) * sg * (1.f + a * (1.f - sg)));
    }
    V* out = reinterpret_cast<V*>(dgu + t * 2 * F);
    out[f] = da;
    out[fv + f] = du;
  }
}

template <typename F>
int dispatch(int dtype, F&& f) {
  switch (dtype) {
    case 1: f(__nv_bfloat16{}); break;
    case 2: f(__half{}); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int norm_backward_warps(int64_t rows, int sms) {
  int64_t w = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock * kWarpsPerBlock;
  const int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 132) * 16;
  if (w > cap) w = cap;
  return static_cast<int>(w < kWarpsPerBlock ? kWarpsPerBlock : w);
}

int rms_norm_backward(int dtype, const void* x, const void* w, const void* dy, float eps, void* dx, float* dw_part,
                      int64_t T, int64_t H, int warps, void* stream) {
  if (H % 8 != 0 || H > 4096 || warps % kWarpsPerBlock != 0) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const int nv = static_cast<int>(H / 8), npl = (nv + 31) / 32;
  const unsigned blocks = static_cast<unsigned>(warps / kWarpsPerBlock);
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    auto launch = [&](auto k) {
      constexpr int kN = decltype(k)::value;
      rms_norm_bwd_kernel<E, kN><<<blocks, kWarpsPerBlock * 32, 0, st>>>(
          static_cast<const E*>(x), static_cast<const E*>(w), static_cast<const E*>(dy), eps, static_cast<E*>(dx),
          dw_part, T, static_cast<int>(H));
    };
    if (npl <= 1) launch(std::integral_constant<int, 1>{});
    else if (npl <= 2) launch(std::integral_constant<int, 2>{});
    else if (npl <= 4) launch(std::integral_constant<int, 4>{});
    else if (npl <= 8) launch(std::integral_constant<int, 8>{});
    else launch(std::integral_constant<int, 16>{});
  });
}

int qk_norm_rope_backward(int dtype, const void* qkv, const void* qw, const void* kw, float eps, const void* cos,
                          const void* sin, const void* dq, const void* dk, const void* dv, void* dqkv, float* dw_part,
                          int64_t B, int64_t L, int64_t hq, int64_t hkv, int64_t D, int warps, void* stream) {
  if (D % 2 != 0 || D / 2 > 32 * kMaxPairs || warps % kWarpsPerBlock != 0) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>(warps / kWarpsPerBlock);
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    qk_bwd_kernel<E><<<blocks, kWarpsPerBlock * 32, 0, st>>>(
        static_cast<const E*>(qkv), static_cast<const E*>(qw), static_cast<const E*>(kw), eps,
        static_cast<const E*>(cos), static_cast<const E*>(sin), static_cast<const E*>(dq), static_cast<const E*>(dk),
        static_cast<const E*>(dv), static_cast<E*>(dqkv), dw_part, static_cast<int>(L), static_cast<int>(hq),
        static_cast<int>(hkv), static_cast<int>(D), B * L);
  });
}

int silu_mul_backward(int dtype, const void* gu, const void* dout, void* dgu, int64_t T, int64_t F, void* stream) {
  if (T * F == 0) return 0;
  if (F % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const int threads = 256;
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    int64_t blocks = (T * F / Vec<E>::kN + threads - 1) / threads;
    if (blocks > 65535L * 16) blocks = 65535L * 16;
    silu_mul_bwd_kernel<E><<<static_cast<unsigned>(blocks), threads, 0, st>>>(
        static_cast<const E*>(gu), static_cast<const E*>(dout), static_cast<E*>(dgu), T, F);
  });
}

}  // namespace dice::model::train::cuda
