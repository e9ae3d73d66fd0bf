// The fused inference kernels of the SDAR / Qwen3 decoder (see fused_kernels.h).
//
// Each kernel rounds to the model dtype exactly where HF's eager PyTorch code does (after the
// normalisation, after the weight, after each RoPE product and the sum, after SiLU), so bf16
// results match the unfused path except where an fp32 sum is reduced in another order.
#include "fused_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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

// ---- decode attention ---------------------------------------------------------------------------
// Block-decode attention on tensor cores (flash-decoding). The G*L query rows that share a kv
// head (G query heads x L block tokens, at most 16) are one m16 tile; a CTA of 4 warps takes one
// (split of the keys, kv head, row), each warp 16 keys at a time: S = Q K^T by mma m16n8k16,
// online softmax in fp32, O += P V with P rounded to T and V fed by ldmatrix.trans from shared
// memory. Warps merge in shared memory; splits (when B * Hkv CTAs cannot fill the GPU) merge in
// a second kernel.
constexpr int kAttnWarps = 4;
constexpr int kAttnRows = 16;

template <typename T> struct MmaType;
template <> struct MmaType<__nv_bfloat16> {
  static __device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};
template <> struct MmaType<__half> {
  static __device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};

__device__ __forceinline__ uint32_t ld32(const void* p) { return *static_cast<const uint32_t*>(p); }

struct AttnArgs {
  const void* q;  // [B, Hq, L, D] contiguous
  const void* k;
  const void* v;  // [B, Hkv, S, D], strides below
  Strides3 ks, vs;
  const int64_t* kv_len;  // [B] or null (every row: k_all)
  int k_all, B, Hq, Hkv, L, split_len;
  float scale_log2;  // softmax scale * log2(e)
  void* out;         // [B, L, Hq, D] (one split)
  float* part_o;     // [splits, B, Hkv, 16, D] unnormalised (several splits)
  float* part_ml;    // [splits, B, Hkv, 16, 2] (row max in log2 units, row sum)
};

template <typename T, int D>
__global__ void __launch_bounds__(kAttnWarps * 32) decode_attn_kernel(AttnArgs a) {
  using M = MmaType<T>;
  constexpr int kPad = D + 8;  // V rows padded: ldmatrix's eight row reads hit distinct banks
  constexpr int kVBytes = kAttnWarps * 16 * kPad * 2;
  constexpr int kOBytes = kAttnWarps * kAttnRows * D * 4;
  __shared__ __align__(16) unsigned char smem[(kVBytes > kOBytes ? kVBytes : kOBytes) + kAttnWarps * kAttnRows * 8];
  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int G = a.Hq / a.Hkv, R = G * a.L;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int klen = a.kv_len ? min(static_cast<int>(a.kv_len[b]), a.k_all) : a.k_all;
  const int kb = split * a.split_len, ke = min(klen, kb + a.split_len);

  const T* qb = static_cast<const T*>(a.q) + static_cast<int64_t>(b * a.Hq + kvh * G) * a.L * D;
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int c = kk * 16 + tig * 2;
    qa[kk][0] = g < R ? ld32(qb + g * D + c) : 0u;
    qa[kk][1] = g + 8 < R ? ld32(qb + (g + 8) * D + c) : 0u;
    qa[kk][2] = g < R ? ld32(qb + g * D + c + 8) : 0u;
    qa[kk][3] = g + 8 < R ? ld32(qb + (g + 8) * D + c + 8) : 0u;
  }
  const T* kbase = static_cast<const T*>(a.k) + b * a.ks.b + kvh * a.ks.h;
  const T* vbase = static_cast<const T*>(a.v) + b * a.vs.b + kvh * a.vs.h;
  T* vs = reinterpret_cast<T*>(smem) + warp * 16 * kPad;

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // rows g and g + 8

  for (int k0 = kb + warp * 16; k0 < ke; k0 += kAttnWarps * 16) {
    // Stage this chunk's 16 V rows (zeros past the end: P is 0 there, but 0 * NaN is not).
    for (int c = lane; c < 16 * (D / 8); c += 32) {
      const int r = c / (D / 8), col = (c % (D / 8)) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (k0 + r < ke) val = *reinterpret_cast<const uint4*>(vbase + static_cast<int64_t>(k0 + r) * a.vs.s + col);
      *reinterpret_cast<uint4*>(vs + r * kPad + col) = val;
    }
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int key = k0 + t * 8 + g;
      const bool valid = key < ke;
      const T* kp = kbase + static_cast<int64_t>(valid ? key : kb) * a.ks.s;
      uint32_t kr[D / 16][2];
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        kr[kk][0] = valid ? ld32(kp + kk * 16 + tig * 2) : 0u;
        kr[kk][1] = valid ? ld32(kp + kk * 16 + tig * 2 + 8) : 0u;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) M::mma(s[t], qa[kk], kr[kk][0], kr[kk][1]);
    }
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool in = k0 + t * 8 + tig * 2 + e < ke;
        s[t][e] = in ? s[t][e] * a.scale_log2 : -INFINITY;
        s[t][2 + e] = in ? s[t][2 + e] * a.scale_log2 : -INFINITY;
        mx_lo = fmaxf(mx_lo, s[t][e]);
        mx_hi = fmaxf(mx_hi, s[t][2 + e]);
      }
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, o2));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, o2));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    const float base_lo = mn_lo == -INFINITY ? 0.f : mn_lo, base_hi = mn_hi == -INFINITY ? 0.f : mn_hi;
    const float al_lo = exp2f(m_lo - base_lo), al_hi = exp2f(m_hi - base_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    float p[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[t][e] = exp2f(s[t][e] - base_lo);
        p[t][2 + e] = exp2f(s[t][2 + e] - base_hi);
      }
    l_lo = l_lo * al_lo + p[0][0] + p[0][1] + p[1][0] + p[1][1];
    l_hi = l_hi * al_hi + p[0][2] + p[0][3] + p[1][2] + p[1][3];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[j][0] *= al_lo;
      o[j][1] *= al_lo;
      o[j][2] *= al_hi;
      o[j][3] *= al_hi;
    }
    const uint32_t pa[4] = {M::pack(p[0][0], p[0][1]), M::pack(p[0][2], p[0][3]), M::pack(p[1][0], p[1][1]),
                            M::pack(p[1][2], p[1][3])};
    __syncwarp();
#pragma unroll
    for (int j2 = 0; j2 < D / 16; ++j2) {
      const int key = (lane & 7) + ((lane >> 3) & 1) * 8, col = j2 * 16 + (lane >> 4) * 8;
      const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(vs + key * kPad + col));
      uint32_t r0, r1, r2, r3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                   : "r"(addr));
      M::mma(o[2 * j2], pa, r0, r1);
      M::mma(o[2 * j2 + 1], pa, r2, r3);
    }
    __syncwarp();
  }
#pragma unroll
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, o2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, o2);
  }
  __syncthreads();  // the V staging area becomes the warps' partial results
  float* ow = reinterpret_cast<float*>(smem);                       // [warps][16][D]
  float* mlw = reinterpret_cast<float*>(smem + kOBytes);            // [warps][16][2]
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int col = j * 8 + tig * 2;
    ow[(warp * kAttnRows + g) * D + col] = o[j][0];
    ow[(warp * kAttnRows + g) * D + col + 1] = o[j][1];
    ow[(warp * kAttnRows + g + 8) * D + col] = o[j][2];
    ow[(warp * kAttnRows + g + 8) * D + col + 1] = o[j][3];
  }
  if (tig == 0) {
    mlw[(warp * kAttnRows + g) * 2] = m_lo;
    mlw[(warp * kAttnRows + g) * 2 + 1] = l_lo;
    mlw[(warp * kAttnRows + g + 8) * 2] = m_hi;
    mlw[(warp * kAttnRows + g + 8) * 2 + 1] = l_hi;
  }
  __syncthreads();
  const bool single = a.part_o == nullptr;
  for (int idx = threadIdx.x; idx < R * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) mm = fmaxf(mm, mlw[(w * kAttnRows + r) * 2]);
    const float base = mm == -INFINITY ? 0.f : mm;
    float ll = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) {
      const float f = exp2f(mlw[(w * kAttnRows + r) * 2] - base);
      ll += mlw[(w * kAttnRows + r) * 2 + 1] * f;
      acc += ow[(w * kAttnRows + r) * D + d] * f;
    }
    if (single) {
      const int h = kvh * G + r / a.L, l = r % a.L;
      static_cast<T*>(a.out)[((static_cast<int64_t>(b) * a.L + l) * a.Hq + h) * D + d] =
          from_f<T>(ll > 0.f ? acc / ll : 0.f);
    } else {
      const int64_t row = ((static_cast<int64_t>(split) * a.B + b) * a.Hkv + kvh) * kAttnRows + r;
      a.part_o[row * D + d] = acc;
      if (d == 0) {
        a.part_ml[row * 2] = mm;
        a.part_ml[row * 2 + 1] = ll;
      }
    }
  }
}

// Merges the splits: one CTA per (kv head, row).
template <typename T, int D>
__global__ void decode_attn_merge_kernel(AttnArgs a, int splits) {
  const int kvh = blockIdx.x, b = blockIdx.y, G = a.Hq / a.Hkv, R = G * a.L;
  for (int idx = threadIdx.x; idx < R * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    float mm = -INFINITY;
    for (int sp = 0; sp < splits; ++sp) {
      const int64_t row = ((static_cast<int64_t>(sp) * a.B + b) * a.Hkv + kvh) * kAttnRows + r;
      mm = fmaxf(mm, a.part_ml[row * 2]);
    }
    const float base = mm == -INFINITY ? 0.f : mm;
    float ll = 0.f, acc = 0.f;
    for (int sp = 0; sp < splits; ++sp) {
      const int64_t row = ((static_cast<int64_t>(sp) * a.B + b) * a.Hkv + kvh) * kAttnRows + r;
      const float f = exp2f(a.part_ml[row * 2] - base);
      ll += a.part_ml[row * 2 + 1] * f;
      acc += a.part_o[row * D + d] * f;
    }
    const int h = kvh * G + r / a.L, l = r % a.L;
    static_cast<T*>(a.out)[((static_cast<int64_t>(b) * a.L + l) * a.Hq + h) * D + d] = from_f<T>(ll > 0.f ? acc / ll : 0.f);
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

int decode_attention_splits(int64_t B, int64_t Hkv, int64_t K, int sms) {
  const int64_t ctas = B * Hkv;
  const int64_t max_splits = (K + 63) / 64;
  int64_t splits = (2 * sms + ctas - 1) / ctas;
  if (splits > max_splits) splits = max_splits;
  return static_cast<int>(splits < 1 ? 1 : splits);
}

int decode_attention(int dtype, const void* q, const void* k, const int64_t* k_strides, const void* v,
                     const int64_t* v_strides, const int64_t* kv_len, int64_t k_all, int64_t B, int64_t Hq,
                     int64_t Hkv, int64_t L, int64_t D, float scale, int splits, void* out, float* part_o,
                     float* part_ml, void* stream) {
  if (B == 0) return 0;
  if ((dtype != 1 && dtype != 2) || (D != 64 && D != 128) || Hq % Hkv != 0 || (Hq / Hkv) * L > kAttnRows || splits < 1)
    return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  AttnArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.ks = Strides3{k_strides[0], k_strides[1], k_strides[2]};
  a.vs = Strides3{v_strides[0], v_strides[1], v_strides[2]};
  a.kv_len = kv_len;
  a.k_all = static_cast<int>(k_all);
  a.B = static_cast<int>(B);
  a.Hq = static_cast<int>(Hq);
  a.Hkv = static_cast<int>(Hkv);
  a.L = static_cast<int>(L);
  a.split_len = static_cast<int>((k_all + splits - 1) / splits + 63) / 64 * 64;
  a.scale_log2 = scale * 1.4426950408889634f;
  a.out = out;
  a.part_o = splits > 1 ? part_o : nullptr;
  a.part_ml = splits > 1 ? part_ml : nullptr;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(Hkv), static_cast<unsigned>(B));
  auto launch = [&](auto tag, auto dtag) {
    using E = decltype(tag);
    constexpr int kD = decltype(dtag)::value;
    decode_attn_kernel<E, kD><<<grid, kAttnWarps * 32, 0, st>>>(a);
    if (splits > 1) {
      decode_attn_merge_kernel<E, kD><<<dim3(static_cast<unsigned>(Hkv), static_cast<unsigned>(B)), 256, 0, st>>>(a, splits);
    }
  };
  if (dtype == 1) {
    if (D == 128) launch(__nv_bfloat16{}, std::integral_constant<int, 128>{});
    else launch(__nv_bfloat16{}, std::integral_constant<int, 64>{});
  } else {
    if (D == 128) launch(__half{}, std::integral_constant<int, 128>{});
    else launch(__half{}, std::integral_constant<int, 64>{});
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace dice::model::fused::cuda
