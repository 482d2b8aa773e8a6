// Probe: does compute-sanitizer racecheck flag a producer warp that stores a tile to shared memory, then
// __syncwarp (bar.warp.sync) and one lane's mbarrier.arrive (mode 0: weft's pattern), against a consumer
// that waits on the mbarrier and reads the tile? Mode 1: every producer thread arrives (count 32).
#include <cstdio>
#include <cstdint>
__device__ void wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
__device__ void arrive(uint32_t bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(bar) : "memory");
}
__global__ void ring(const float* x, float* out, int iters, int mode) {
  __shared__ __align__(16) float tile[2][128];
  __shared__ __align__(8) uint64_t bars[4];  // full[2], empty[2]
  uint32_t full = uint32_t(__cvta_generic_to_shared(&bars[0])), empty = full + 16;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(full + 8 * s), "r"(mode ? 32 : 1));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(empty + 8 * s), "r"(4));
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // producer warp: 4 floats per thread
    for (int i = 0; i < iters; ++i) {
      int s = i % 2;
      wait(empty + 8 * s, ((i / 2) % 2) ^ 1);
      for (int e = 0; e < 4; ++e) tile[s][threadIdx.x * 4 + e] = x[i * 128 + threadIdx.x * 4 + e];
      __syncwarp();
      if (mode || threadIdx.x == 0) arrive(full + 8 * s);
    }
  } else {  // 4 consumer warps: one float per thread, each warp's lane 0 releases the slot
    int t = threadIdx.x - 32;
    for (int i = 0; i < iters; ++i) {
      int s = i % 2;
      wait(full + 8 * s, (i / 2) % 2);
      float v = tile[s][t];
      __syncwarp();
      if ((threadIdx.x & 31) == 0) arrive(empty + 8 * s);
      out[i * 128 + t] = v * 3 + 1;
    }
  }
}
int main(int argc, char** argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0, iters = 24;
  float *x, *out;
  cudaMallocManaged(&x, iters * 128 * 4);
  cudaMallocManaged(&out, iters * 128 * 4);
  for (int i = 0; i < iters * 128; ++i) x[i] = float(i % 1013);
  ring<<<1, 160>>>(x, out, iters, mode);
  cudaError_t e = cudaDeviceSynchronize();
  int bad = 0;
  for (int i = 0; i < iters * 128; ++i) bad += out[i] != x[i] * 3 + 1;
  std::printf("race_probe mode %d: %s, %d wrong\n", mode, cudaGetErrorString(e), bad);
  return bad != 0 || e != cudaSuccess;
}
