// Cycles an SM spends per wgmma instruction (TF32 m64nNk8, bf16 m64nNk16; A from shared memory "SS" or registers
// "RS"; N = 24 and 64, the conv_transpose seeds' C_out), the way the shift kernel issues them: one block of two
// warpgroups an SM, four accumulator chains each, the A start moved a pixel (16 bytes) a tap.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_rate tools/probe/wgmma_rate.cu && /tmp/wgmma_rate
//
// H200, 2026-11-27 17:10 UTC: SS m64n24k8 22.4 cycles (54% of the TF32 rate), RS 13.9 (86%), SS m64n64k8 32.2 (99%),
// K halves in planes or adjacent alike; bf16 k16 the same cycles (bench/RESULTS.md, the shift kernel's section).
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t saddr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ uint64_t desc(const void* start, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = saddr(start);
  return uint64_t{(a & 0x3ffff) >> 4} | uint64_t{(lbo & 0x3ffff) >> 4} << 16 | uint64_t{(sbo & 0x3ffff) >> 4} << 32;
}
#define ACC12 "+f"(c[0]),"+f"(c[1]),"+f"(c[2]),"+f"(c[3]),"+f"(c[4]),"+f"(c[5]),"+f"(c[6]),"+f"(c[7]),"+f"(c[8]),"+f"(c[9]),"+f"(c[10]),"+f"(c[11])
#define D12 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}"
#define ACC32 ACC12,"+f"(c[12]),"+f"(c[13]),"+f"(c[14]),"+f"(c[15]),"+f"(c[16]),"+f"(c[17]),"+f"(c[18]),"+f"(c[19]),"+f"(c[20]),"+f"(c[21]),"+f"(c[22]),"+f"(c[23]),"+f"(c[24]),"+f"(c[25]),"+f"(c[26]),"+f"(c[27]),"+f"(c[28]),"+f"(c[29]),"+f"(c[30]),"+f"(c[31])
#define D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"

template <int N> __device__ void ss(float* c, uint64_t a, uint64_t b);
template <> __device__ void ss<24>(float* c, uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n24k8.f32.tf32.tf32 " D12 ", %12, %13, 1, 1, 1;\n" : ACC12 : "l"(a), "l"(b));
}
template <> __device__ void ss<64>(float* c, uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " D32 ", %32, %33, 1, 1, 1;\n" : ACC32 : "l"(a), "l"(b));
}
template <int N> __device__ void rs(float* c, const uint32_t* r, uint64_t b);
template <> __device__ void rs<24>(float* c, const uint32_t* r, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n24k8.f32.tf32.tf32 " D12 ", {%12,%13,%14,%15}, %16, 1, 1, 1;\n" : ACC12 : "r"(r[0]),"r"(r[1]),"r"(r[2]),"r"(r[3]), "l"(b));
}
template <> __device__ void rs<64>(float* c, const uint32_t* r, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " D32 ", {%32,%33,%34,%35}, %36, 1, 1, 1;\n" : ACC32 : "r"(r[0]),"r"(r[1]),"r"(r[2]),"r"(r[3]), "l"(b));
}
template <int N> __device__ void ssb(float* c, uint64_t a, uint64_t b);
template <> __device__ void ssb<24>(float* c, uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 " D12 ", %12, %13, 1, 1, 1, 0, 0;\n" : ACC12 : "l"(a), "l"(b));
}
template <> __device__ void ssb<64>(float* c, uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " D32 ", %32, %33, 1, 1, 1, 0, 0;\n" : ACC32 : "l"(a), "l"(b));
}

constexpr int kIters = 2048, MB = 4;
// mode 0: SS planes (LBO = 64 KB), 1: SS adjacent K halves (LBO 128, SBO 256), 2: RS, 3: SS bf16 planes
template <int N, int kMode>
__global__ void __launch_bounds__(256, 1) bench(float* out, long long* cycles, int shift) {
  extern __shared__ __align__(1024) unsigned char smem[];
  float c[MB][N / 2];
  for (int m = 0; m < MB; ++m) for (int i = 0; i < N / 2; ++i) c[m][i] = 0.f;
  for (int i = threadIdx.x; i < 160 * 1024 / 4; i += 256) reinterpret_cast<float*>(smem)[i] = 0.001f * (i % 7);
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const uint32_t lbo = kMode == 1 ? 128 : 65536;
  const uint32_t sbo = kMode == 1 ? 256 : 128;
  uint64_t a0 = desc(smem + wg * 8192, lbo, sbo);
  const uint64_t b0 = desc(smem + 140 * 1024, 128, 256);
  uint32_t r[4] = {threadIdx.x, threadIdx.x * 3u, 7u, 9u};
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
    const uint32_t off = (it % 27) * shift;  // the tap shift, 16-byte units
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const uint64_t a = a0 + off + m * 64 * (kMode == 1 ? 2 : 1);
      if constexpr (kMode == 2) rs<N>(c[m], r, b0 + (it % 27) * N * 2);
      else if constexpr (kMode == 3) ssb<N>(c[m], a, b0 + (it % 27) * N * 2);
      else ss<N>(c[m], a, b0 + (it % 27) * N * 2);
    }
    if (it % 27 == 26) asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  long long t1 = clock64();
  float s = 0;
  for (int m = 0; m < MB; ++m) for (int i = 0; i < N / 2; ++i) s += c[m][i];
  out[blockIdx.x * 256 + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int N, int kMode>
void run(const char* name, int shift) {
  float* out; long long* cyc;
  cudaMalloc(&out, 132 * 256 * 4); cudaMalloc(&cyc, 132 * 8);
  auto k = bench<N, kMode>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  k<<<132, 256, 200 * 1024>>>(out, cyc, shift);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0);
  k<<<132, 256, 200 * 1024>>>(out, cyc, shift);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  long long h[132]; cudaMemcpy(h, cyc, sizeof h, cudaMemcpyDeviceToHost);
  const double per = double(h[0]) / (2.0 * kIters * MB);  // both warpgroups share the tensor cores
  const double k8 = kMode == 3 ? 2 : 1;
  printf("%-34s N=%2d shift=%d: %.1f cycles an instruction (SM), %.0f MAC/clk/SM (%.0f%% of 1024 tf32 / 2048 bf16), %.3f ms [%s]\n",
         name, N, shift, per, 64.0 * N * 8 * k8 / per, 100.0 * 64.0 * N * 8 * k8 / per / (1024.0 * k8), ms,
         cudaGetErrorString(cudaGetLastError()));
}

int main() {
  run<24, 0>("SS tf32, K halves in planes", 1);
  run<24, 0>("SS tf32, K halves in planes", 0);
  run<24, 1>("SS tf32, K halves adjacent", 0);
  run<24, 2>("RS tf32", 1);
  run<64, 0>("SS tf32, K halves in planes", 1);
  run<64, 1>("SS tf32, K halves adjacent", 0);
  run<64, 2>("RS tf32", 1);
  run<24, 3>("SS bf16, K halves in planes", 1);
  run<64, 3>("SS bf16, K halves in planes", 1);
  return 0;
}
