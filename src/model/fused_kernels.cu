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

template <typename T, bool kAdd>
__global__ void rms_norm_kernel(T* x, int64_t x_stride, const T* delta, int64_t delta_stride, const T* w, T* y,
                                int H, float eps) {
  const int64_t t = blockIdx.x;
  T* xr = x + t * x_stride;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v;
    if constexpr (kAdd) {
      const T s = from_f<T>(to_f(xr[i]) + to_f(delta[t * delta_stride + i]));
      xr[i] = s;
      v = to_f(s);
    } else {
      v = to_f(xr[i]);
    }
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) * (1.f / static_cast<float>(H)) + eps);
  T* yr = y + t * static_cast<int64_t>(H);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {  // the same i as above: this thread's own writes
    yr[i] = from_f<T>(to_f(w[i]) * round_to<T>(to_f(xr[i]) * r));
  }
}

struct Strides3 {
  int64_t b, h, s;
};

// One block per (token, head); thread j < D/2 owns elements j and j + D/2 (a RoPE pair).
template <typename T>
__global__ void qk_norm_rope_scatter_kernel(const T* qkv, int64_t qkv_stride, const T* qw, const T* kw, float eps,
                                            const T* cos, const T* sin, const int64_t* slots, T* q_out, T* k_dst,
                                            Strides3 ks, T* v_dst, Strides3 vs, int L, int hq, int hkv, int D) {
  const int heads = hq + 2 * hkv;
  const int64_t t = blockIdx.x / heads;
  const int h = static_cast<int>(blockIdx.x % heads);
  const int64_t b = t / L, l = t % L;
  const int half = D / 2, j = threadIdx.x;
  const bool active = j < half;
  const T* src = qkv + t * qkv_stride + static_cast<int64_t>(h) * D;
  const float x1 = active ? to_f(src[j]) : 0.f, x2 = active ? to_f(src[j + half]) : 0.f;

  if (h >= hq + hkv) {  // value head: copied into its cache slot
    if (active) {
      T* dst = v_dst + b * vs.b + static_cast<int64_t>(h - hq - hkv) * vs.h + slots[t] * vs.s;
      dst[j] = src[j];
      dst[j + half] = src[j + half];
    }
    return;
  }
  const bool is_q = h < hq;
  const float r = rsqrtf(block_sum(x1 * x1 + x2 * x2) * (1.f / static_cast<float>(D)) + eps);
  if (!active) return;
  const T* nw = is_q ? qw : kw;
  const float n1 = round_to<T>(to_f(nw[j]) * round_to<T>(x1 * r));
  const float n2 = round_to<T>(to_f(nw[j + half]) * round_to<T>(x2 * r));
  const T* c = cos + t * D;
  const T* s = sin + t * D;
  // x * cos + swap_halves(x) * signed_sin, each product and the sum rounded.
  const T o1 = from_f<T>(round_to<T>(n1 * to_f(c[j])) + round_to<T>(n2 * to_f(s[j])));
  const T o2 = from_f<T>(round_to<T>(n2 * to_f(c[j + half])) + round_to<T>(n1 * to_f(s[j + half])));
  T* dst = is_q ? q_out + ((b * hq + h) * static_cast<int64_t>(L) + l) * D
                : k_dst + b * ks.b + static_cast<int64_t>(h - hq) * ks.h + slots[t] * ks.s;
  dst[j] = o1;
  dst[j + half] = o2;
}

template <typename T>
__global__ void silu_mul_kernel(const T* gu, int64_t gu_stride, T* out, int64_t T_rows, int64_t F) {
  const int64_t n = T_rows * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / F, f = i % F;
    const float g = to_f(gu[t * gu_stride + f]);
    const float silu = round_to<T>(g / (1.f + expf(-g)));
    out[i] = from_f<T>(silu * to_f(gu[t * gu_stride + F + f]));
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
  const int threads = block_for((H + 3) / 4);  // about four elements per thread
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
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
  const int64_t blocks = B * L * (hq + 2 * hkv);
  if (blocks == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  const Strides3 ks{k_strides[0], k_strides[1], k_strides[2]}, vs{v_strides[0], v_strides[1], v_strides[2]};
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    qk_norm_rope_scatter_kernel<E><<<static_cast<unsigned>(blocks), block_for(D / 2), 0, st>>>(
        static_cast<const E*>(qkv), qkv_stride, static_cast<const E*>(qw), static_cast<const E*>(kw), eps,
        static_cast<const E*>(cos), static_cast<const E*>(sin), slots, static_cast<E*>(q_out), static_cast<E*>(k_dst),
        ks, static_cast<E*>(v_dst), vs, static_cast<int>(L), static_cast<int>(hq), static_cast<int>(hkv),
        static_cast<int>(D));
  });
}

int silu_mul(int dtype, const void* gu, int64_t gu_stride, void* out, int64_t T, int64_t F, void* stream) {
  const int64_t n = T * F;
  if (n == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535L * 16) blocks = 65535L * 16;
  return dispatch(dtype, [&](auto tag) {
    using E = decltype(tag);
    silu_mul_kernel<E><<<static_cast<unsigned>(blocks), threads, 0, st>>>(static_cast<const E*>(gu), gu_stride,
                                                                          static_cast<E*>(out), T, F);
  });
}

}  // namespace dice::model::fused::cuda
