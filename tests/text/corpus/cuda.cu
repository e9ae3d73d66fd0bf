// Tiled matrix multiply with shared memory and a warp-level reduction.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>

#define TILE 32
#define CUDA_CHECK(stmt)                                                        \
  do {                                                                          \
    cudaError_t err_ = (stmt);                                                  \
    if (err_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      abort();                                                                  \
    }                                                                           \
  } while (0)

template <typename T, int kTile = TILE>
__global__ void matmul_tiled(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int M, int N, int K) {
  __shared__ T As[kTile][kTile + 1];
  __shared__ T Bs[kTile][kTile + 1];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  T acc = T(0);
  for (int t = 0; t < (K + kTile - 1) / kTile; ++t) {
    As[threadIdx.y][threadIdx.x] = (row < M && t * kTile + threadIdx.x < K) ? A[row * K + t * kTile + threadIdx.x] : T(0);
    Bs[threadIdx.y][threadIdx.x] = (col < N && t * kTile + threadIdx.y < K) ? B[(t * kTile + threadIdx.y) * N + col] : T(0);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

__global__ void row_sum(const float* x, float* out, int cols) {
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += x[blockIdx.x * cols + c];
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) atomicAdd(&out[blockIdx.x], s);
}

int main(int argc, char** argv) {
  const int M = 1024, N = 1024, K = 512;
  float *a, *b, *c;
  CUDA_CHECK(cudaMalloc(&a, sizeof(float) * M * K));
  CUDA_CHECK(cudaMalloc(&b, sizeof(float) * K * N));
  CUDA_CHECK(cudaMalloc(&c, sizeof(float) * M * N));
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  matmul_tiled<float><<<grid, block>>>(a, b, c, M, N, K);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  printf("done: %d x %d (%.3f GFLOP)\n", M, N, 2.0 * M * N * K * 1e-9);
  return a != nullptr && b != nullptr ? 0 : 1;  // a || b && !c >> 2 <<= 3 != 4 -> x::y
}
