// The fused inference kernels of the SDAR / Qwen3 decoder (see fused_kernels.h).
//
// Each kernel rounds to the model dtype exactly where HF's eager PyTorch code does (after the
// normalisation, after the weight, after each RoPE product and the sum, after SiLU), so bf16
// results match the unfused path except where an fp32 sum is reduced in another order.
#include "fused_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace dice::model::fused::cuda {

namespace {

template <typename T> __device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }

// v rounded to T and back: the value PyTorch would hold after an op whose result is a T tensor.
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f(from_f<T>(v)); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

// 16 bytes of T: the unit of the vectorised loads and stores.
template <typename T>
struct alignas(16) Vec {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

// One block per row; each thread owns whole 16-byte vectors of the row (H % Vec<T>::kN == 0).
template <typename T, bool kAdd>
__global__ void rms_norm_kernel(T* x, int64_t x_stride, const T* delta, int64_t delta_stride, const T* w, T* y,
                                int H, float eps) {
  using V = Vec<T>;
  const int64_t t = blockIdx.x;
  V* xr = reinterpret_cast<V*>(x + t * x_stride);
  const int nv = H / V::kN;
  float ss = 0.f;
  for (int i = threadIdx.x; i < nv; i += blockDim.x) {
    V a = xr[i];
    if constexpr (kAdd) {
      const V d = reinterpret_cast<const V*>(delta + t * delta_stride)[i];
#pragma unroll
      for (int e = 0; e < V::kN; ++e) a.v[e] = from_f<T>(to_f(a.v[e]) + to_f(d.v[e]));
      xr[i] = a;
    }
#pragma unroll
    for (int e = 0; e < V::kN; ++e) ss += to_f(a.v[e]) * to_f(a.v[e]);
  }
  const float r = rsqrtf(block_sum(ss) * (1.f / static_cast<float>(H)) + eps);
  V* yr = reinterpret_cast<V*>(y + t * static_cast<int64_t>(H));
  const V* wv = reinterpret_cast<const V*>(w);
  for (int i = threadIdx.x; i < nv; i += blockDim.x) {  // the same i as above: this thread's own writes
    const V a = xr[i], g = wv[i];
    V o;
#pragma unroll
    for (int e = 0; e < V::kN; ++e) o.v[e] = from_f<T>(to_f(g.v[e]) * round_to<T>(to_f(a.v[e]) * r));
    yr[i] = o;
  }
}

struct Strides3 {
  int64_t b, h, s;
};

constexpr int kHeadsPerBlock = 4;  // qk_norm_rope_scatter: a warp per head

// Warp w of block (token t, group g) handles head g * kHeadsPerBlock + w; lane l owns the RoPE
// pairs (j, j + D/2) for j = l, l + 32, ... (at most kMaxPairs per lane).
constexpr int kMaxPairs = 4;  // D <= 256
template <typename T>
__global__ void qk_norm_rope_scatter_kernel(const T* qkv, int64_t qkv_stride, const T* qw, const T* kw, float eps,
                                            const T* cos, const T* sin, const int64_t* slots, T* q_out, T* k_dst,
                                            Strides3 ks, T* v_dst, Strides3 vs, int L, int hq, int hkv, int D) {
  const int heads = hq + 2 * hkv, groups = (heads + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int64_t t = blockIdx.x / groups;
  const int h = static_cast<int>(blockIdx.x % groups) * kHeadsPerBlock + static_cast<int>(threadIdx.x >> 5);
  if (h >= heads) return;
  const int lane = threadIdx.x & 31, half = D / 2;
  const int64_t b = t / L, l = t % L;
  const T* src = qkv + t * qkv_stride + static_cast<int64_t>(h) * D;

  if (h >= hq + hkv) {  // value head: copied into its cache slot
    T* dst = v_dst + b * vs.b + static_cast<int64_t>(h - hq - hkv) * vs.h + slots[t] * vs.s;
    for (int j = lane; j < D; j += 32) dst[j] = src[j];
    return;
  }
  float x1[kMaxPairs], x2[kMaxPairs], ss = 0.f;
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
    const int j = lane + 32 * p;
    x1[p] = j < half ? to_f(src[j]) : 0.f;
    x2[p] = j < half ? to_f(src[j + half]) : 0.f;
    ss += x1[p] * x1[p] + x2[p] * x2[p];
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = rsqrtf(ss * (1.f / static_cast<float>(D)) + eps);
  const bool is_q = h < hq;
  const T* nw = is_q ? qw : kw;
  const T* c = cos + t * D;
  const T* s = sin + t * D;
  T* dst = is_q ? q_out + ((b * hq + h) * static_cast<int64_t>(L) + l) * D
                : k_dst + b * ks.b + static_cast<int64_t>(h - hq) * ks.h + slots[t] * ks.s;
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
    const int j = lane + 32 * p;
    if (j >= half) break;
    const float n1 = round_to<T>(to_f(nw[j]) * round_to<T>(x1[p] * r));
    const float n2 = round_to<T>(to_f(nw[j + half]) * round_to<T>(x2[p] * r));
    // x * cos + swap_halves(x) * signed_sin, each product and the sum rounded.
    dst[j] = from_f<T>(round_to<T>(n1 * to_f(c[j])) + round_to<T>(n2 * to_f(s[j])));
    dst[j + half] = from_f<T>(round_to<T>(n2 * to_f(c[j + half])) + round_to<T>(n1 * to_f(s[j + half])));
  }
}

// Thread i owns one 16-byte vector of the output (F % Vec<T>::kN == 0).
template <typename T>
__global__ void silu_mul_kernel(const T* gu, int64_t gu_stride, T* out, int64_t T_rows, int64_t F) {
  using V = Vec<T>;
  const int64_t fv = F / V::kN, n = T_rows * fv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / fv, f = i % fv;
    const V* row = reinterpret_cast<const V*>(gu + t * gu_stride);
    const V g = row[f], u = row[fv + f];
    V o;
#pragma unroll
    for (int e = 0; e < V::kN; ++e) {
      const float x = to_f(g.v[e]);
      o.v[e] = from_f<T>(round_to<T>(x / (1.f + expf(-x))) * to_f(u.v[e]));
    }
    reinterpret_cast<V*>(out)[i] = o;
  }
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

// Inverse-CDF draw from softmax(x / temperature), one block per row. Warp w owns a contiguous
// segment of the row (read 32 elements at a time); the warp whose share of the mass holds
// u * total walks its segment with a warp scan to the first index where the running mass
// exceeds it (torch.searchsorted(cumsum, u * total, right=True), clamped to V - 1).
template <typename T>
__global__ void sample_rows_kernel(const T* logits, int64_t stride, int V, const double* uniform, float temperature,
                                   int64_t* token, float* prob) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * stride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int seg = ((V + nw - 1) / nw + 31) / 32 * 32;
  const int begin = min(V, warp * seg), end = min(V, begin + seg);
  auto val = [&](int i) {
    const float v = to_f(x[i]);
    return temperature == 1.f ? v : v / temperature;
  };
  float m = -INFINITY;
  for (int i = begin + lane; i < end; i += 32) m = fmaxf(m, val(i));
  m = block_max(m);
  float s = 0.f;
  for (int i = begin + lane; i < end; i += 32) s += expf(val(i) - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __shared__ float warp_mass[32];
  __shared__ int found;
  if (lane == 0) warp_mass[warp] = s;
  if (threadIdx.x == 0) found = V - 1;
  __syncthreads();
  float before = 0.f, total = 0.f;
  for (int k = 0; k < nw; ++k) {
    if (k < warp) before += warp_mass[k];
    total += warp_mass[k];
  }
  const float target = static_cast<float>(uniform[row]) * total;
  if (before <= target && target < before + warp_mass[warp] && begin < end) {  // exactly one warp, or none
    float run = before;
    int hit_at = end - 1;  // float rounding can leave the target past the last scan: take the end
    for (int i0 = begin; i0 < end; i0 += 32) {
      const int i = i0 + lane;
      const float e = i < end ? expf(val(i) - m) : 0.f;
      float inc = e;
      for (int o = 1; o < 32; o <<= 1) {
        const float n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += n;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, i < end && run + inc > target);
      if (hit) {
        hit_at = i0 + __ffs(hit) - 1;
        break;
      }
      run += __shfl_sync(0xffffffffu, inc, 31);
    }
    if (lane == 0) found = hit_at;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    token[row] = found;
    prob[row] = expf(val(found) - m) / total;
  }
}

int block_for(int64_t n) {  // threads for a row of n elements: a multiple of 32 in [32, 1024]
  int64_t t = (n + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > 1024 ? 1024 : t));
}

template <typename F>
int dispatch(int dtype, F&& f) {
  switch (dtype) {
    case 0: f(float{}); break;
    case 1: f(__nv_bfloat16{}); break;
    case 2: f(__half{}); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int rms_norm(int dtype, void* x, int64_t x_stride, const void* delta, int64_t delta_stride, const void* w, void* y,
             int64_t T, int64_t H, float eps, void* stream) {
  if (T == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    const int threads = block_for(H / Vec<E>::kN);
    if (delta) {
      rms_norm_kernel<E, true><<<static_cast<unsigned>(T), threads, 0, st>>>(
          static_cast<E*>(x), x_stride, static_cast<const E*>(delta), delta_stride, static_cast<const E*>(w),
          static_cast<E*>(y), static_cast<int>(H), eps);
    } else {
      rms_norm_kernel<E, false><<<static_cast<unsigned>(T), threads, 0, st>>>(
          static_cast<E*>(x), x_stride, nullptr, 0, static_cast<const E*>(w), static_cast<E*>(y), static_cast<int>(H),
          eps);
    }
  });
}

int qk_norm_rope_scatter(int dtype, const void* qkv, int64_t qkv_stride, const void* qw, const void* kw, float eps,
                         const void* cos, const void* sin, const int64_t* slots, void* q_out, void* k_dst,
                         const int64_t* k_strides, void* v_dst, const int64_t* v_strides, int64_t B, int64_t L,
                         int64_t hq, int64_t hkv, int64_t D, void* stream) {
  const int64_t blocks = B * L * ((hq + 2 * hkv + kHeadsPerBlock - 1) / kHeadsPerBlock);
  if (blocks == 0) return 0;
  if (D % 2 != 0 || D / 2 > 32 * kMaxPairs) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  const Strides3 ks{k_strides[0], k_strides[1], k_strides[2]}, vs{v_strides[0], v_strides[1], v_strides[2]};
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    qk_norm_rope_scatter_kernel<E><<<static_cast<unsigned>(blocks), 32 * kHeadsPerBlock, 0, st>>>(
        static_cast<const E*>(qkv), qkv_stride, static_cast<const E*>(qw), static_cast<const E*>(kw), eps,
        static_cast<const E*>(cos), static_cast<const E*>(sin), slots, static_cast<E*>(q_out), static_cast<E*>(k_dst),
        ks, static_cast<E*>(v_dst), vs, static_cast<int>(L), static_cast<int>(hq), static_cast<int>(hkv),
        static_cast<int>(D));
  });
}

int silu_mul(int dtype, const void* gu, int64_t gu_stride, void* out, int64_t T, int64_t F, void* stream) {
  if (T * F == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  const int threads = 256;
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    int64_t blocks = (T * F / Vec<E>::kN + threads - 1) / threads;
    if (blocks > 65535L * 16) blocks = 65535L * 16;
    silu_mul_kernel<E><<<static_cast<unsigned>(blocks), threads, 0, st>>>(static_cast<const E*>(gu), gu_stride,
                                                                          static_cast<E*>(out), T, F);
  });
}

int sample_rows(int dtype, const void* logits, int64_t stride, int64_t N, int64_t V, const double* uniform,
                float temperature, int64_t* token, float* prob, void* stream) {
  if (N == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    sample_rows_kernel<E><<<static_cast<unsigned>(N), 1024, 0, st>>>(static_cast<const E*>(logits), stride,
                                                                      static_cast<int>(V), uniform, temperature, token,
                                                                      prob);
  });
}

}  // namespace dice::model::fused::cuda
