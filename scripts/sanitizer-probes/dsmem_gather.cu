// Probe: does compute-sanitizer memcheck flag a correct cp.async.bulk.shared::cluster gather (each block of a
// cluster of 4 copies 512 bytes into slot `rank` of block 0, completing bytes on block 0's mbarrier)?
// Same layout as weft's gather_partials test: mine at 0, parts at 1024 + 512 r, barrier at 3072.
#include <cstdio>
#include <cstdint>
__global__ void __cluster_dims__(4, 1, 1) gather(const float* x, float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  float* mine = reinterpret_cast<float*>(smem);
  float* parts = reinterpret_cast<float*>(smem + 1024);
  uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  uint32_t bar = base + 3072;
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  asm volatile("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;");
  mine[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x] * float(rank + 1);
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;");
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t dst = base + 1024 + 512 * rank, rdst, rbar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rdst) : "r"(dst), "r"(0));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(bar), "r"(0));
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], 512, [%2];"
                 ::"r"(rdst), "r"(base), "r"(rbar) : "memory");
  }
  if (rank == 0) {
    if (threadIdx.x == 0)
      asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], 2048; }" ::"r"(bar));
    uint32_t done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(bar));
    float s = 0;
    for (int r = 0; r < 4; ++r) s += parts[r * 128 + threadIdx.x];
    out[(blockIdx.x / 4) * 128 + threadIdx.x] = s;
  }
  asm volatile("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;");
}
int main() {
  float *x, *out;
  cudaMallocManaged(&x, 8 * 128 * 4);
  cudaMallocManaged(&out, 2 * 128 * 4);
  for (int i = 0; i < 8 * 128; ++i) x[i] = float(i % 97);
  cudaFuncSetAttribute(gather, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  gather<<<8, 128, 3080>>>(x, out);
  cudaError_t e = cudaDeviceSynchronize();
  int bad = 0;
  for (int c = 0; c < 2; ++c)
    for (int t = 0; t < 128; ++t) {
      float want = 0;
      for (int r = 0; r < 4; ++r) want += x[(c * 4 + r) * 128 + t] * float(r + 1);
      bad += out[c * 128 + t] != want;
    }
  std::printf("dsmem_probe: %s, %d wrong\n", cudaGetErrorString(e), bad);
  return bad != 0 || e != cudaSuccess;
}
