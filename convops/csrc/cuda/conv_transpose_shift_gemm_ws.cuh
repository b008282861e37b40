// The shift kernel (conv_transpose_shift_gemm.cuh) for channel tiles of 64, its warpgroups specialized: a producer
// warpgroup loads each k-step's brick, stores it into its stage and starts the weights' bulk copy, while two MMA
// warpgroups only wait for full stages, issue their MMAs (couts as wgmma's M: multiply_step_cout_rows) and hand the
// stages back. Where three or more stages fit (shift_gemm::ws_stages) it runs in place of the shift kernel.
//
// Why: the shift kernel ends every k-step with wgmma::wait<0>, the tile's epilogue and __syncthreads, and only then
// issues the next step's loads and MMAs, so the tensor cores wait for all of it (its parts switched off, H200
// 2026-11-27 19:07 UTC: the MMAs alone are about half of each seed's time). Here the MMA warpgroups issue step s + 1
// before waiting for step s (wgmma::wait<1>), so the MMAs of consecutive steps queue back to back.
//
// Stages: with two, both sides waited on each other (SASS stall sampling, H200 2026-11-27 21:06 UTC, L1-65 bf16: the
// MMA warps 13% of their samples on the full barrier, the producer 14% on the empty one), since the producer may
// refill a stage only once the MMAs of two steps back are done, and was no faster than the shift kernel (L1-65 TF32
// 1.60 / 1.59 ms, bf16 0.926 / 0.885, 21:28 UTC). Couts as M need less of the epilogue's shared memory
// (store_tile_cout_rows), so a third stage fits: TF32 1.37-1.44 ms, bf16 0.847-0.862 (same call, op alone, do_bench
// medians; L1-65's stage is 67 KB), and with the epilogue's stores a cout row at a time 1.24-1.31 / 0.74-0.76 against
// the shift kernel's 1.55-1.57 / 0.88-0.90 (22:32 UTC).
//
// Barriers: full[i] completes when the producer's 128 threads have stored stage i's brick (and fenced it for the async
// proxy) and the weights' bytes have landed; empty[i] when the 256 MMA threads have seen their MMAs on stage i
// complete. Fill f of stage i is its barriers' phase f (parity f & 1).
// Registers: a 384-thread block starts with 168 a thread (__launch_bounds__), 64,512 in all, and setmaxnreg only moves
// them between warpgroups (an increase waits until the block's pool has them: asking for more than the decreases free
// hangs, CUTLASS issue #2007). The producer keeps half a step's units (48 registers), the MMA warpgroups their 96
// accumulators: 136 / 184.
#pragma once

#include "cuda/bulk_copy.cuh"
#include "cuda/conv_transpose_shift_gemm.cuh"

namespace convops {
namespace cuda {
namespace shift_gemm {

constexpr int kProducerThreads = 128;  // one warpgroup: the producer (warpgroups 1 and 2 multiply)
constexpr int kWsThreads = kProducerThreads + kThreads;
constexpr int kWsMinStages = 3, kWsMaxStages = 4;
constexpr int kWsBarrierBytes = 128;  // the barriers' static shared memory (ptxas -v: 128 bytes)
constexpr int kLaunchRegisters = 65536 / kWsThreads / 8 * 8;  // 168
constexpr int kProducerRegisters = 136, kMmaRegisters = 184;
static_assert(kProducerThreads * kProducerRegisters + kThreads * kMmaRegisters <= kWsThreads * kLaunchRegisters &&
                  kProducerRegisters % 8 == 0 && kMmaRegisters % 8 == 0,
              "setmaxnreg must share the block's launch registers");

// For A/B timing, read once: CONVOPS_SHIFT_WS=0 keeps the shift kernel everywhere.
inline bool ws_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("CONVOPS_SHIFT_WS");
    return env == nullptr || std::string(env) != "0";
  }();
  return on;
}

// The stages the warp-specialized kernel gets for a plan: as many as fit (at most 4), or 0 where it does not apply
// (channel tiles of 24, or fewer than kWsMinStages stages).
inline int ws_stages(const Plan& plan, int n_tile, int element_bytes, int shared_limit) {
  if (n_tile != 64 || !ws_enabled()) return 0;
  const int fixed = kWsBarrierBytes + cout_rows_epilogue_bytes(element_bytes);
  const int stages = std::min(kWsMaxStages, (shared_limit - fixed) / plan.stage_bytes);
  return stages >= kWsMinStages ? stages : 0;
}

// The passes the producer makes over a k-step's unit indices: its threads hold max_units(64) units each, so one pass
// where that covers them (L1-65's 368 indices), else two (the shift kernel's 256 threads cover at most twice as many).
inline int ws_producer_halves(const Plan& plan) {
  return plan.unit_indices > max_units(64) * kProducerThreads ? 2 : 1;
}

// The warp-specialized kernel's dynamic shared memory: its stages, then the epilogue's slices (store_tile_cout_rows).
__host__ __device__ inline int ws_epilogue_offset(const Params& p) { return p.stages * p.stage_bytes; }

template <class Math, bool kQuartets>
__device__ __forceinline__ void produce(const Params& p, unsigned char* smem, uint64_t* full, uint64_t* empty) {
  constexpr int kUnits = max_units(64);
  const int thread = threadIdx.x;  // the producer warpgroup's
  Units<kUnits> units;
  int i = 0, fill = 0;  // this step fills stage i for the fill-th time
  for (Cursor at = first_step(p); at.tile_index < p.total_tiles; at = next_step(p, at)) {
    unsigned char* stage = smem + i * p.stage_bytes;
    load_units<Math, kQuartets>(p, at.tile, at.k, units, thread, kProducerThreads);  // before the wait: registers only
    if (fill > 0) bulk::wait(&empty[i], (fill - 1) & 1);
    if (thread == 0) {
      bulk::expect_bytes(&full[i], static_cast<uint32_t>(p.weight_step_bytes));
      bulk::copy_to_shared(stage + 2 * p.brick_pixels * kGroupBytes, weights_of(p, at.tile, at.k),
                           static_cast<uint32_t>(p.weight_step_bytes), &full[i]);
    }
    // The shift kernel's 256 threads' units, in two halves where a k-step has more than the first holds (a branch
    // the grid takes alike: L1-65's 368 units fit in one).
    store_units<Math, kQuartets>(p, units, stage, thread, kProducerThreads);
    if (p.producer_halves == 2) {
      const int second = thread + kUnits * kProducerThreads;
      load_units<Math, kQuartets>(p, at.tile, at.k, units, second, kProducerThreads);
      store_units<Math, kQuartets>(p, units, stage, second, kProducerThreads);
    }
    wgmma::publish_stores();  // the brick's stores, for wgmma's proxy
    bulk::arrive(&full[i]);
    if (++i == p.stages) i = 0, ++fill;
  }
}

template <class Math, int MB>
__device__ __forceinline__ void consume(const Params& p, unsigned char* smem, uint64_t* full, uint64_t* empty, int wg) {
  const int thread = threadIdx.x - kProducerThreads;  // 0-255
  float acc[MB][32];
  Tile multiplied{};
  bool pending = false;
  int s = 0, i = 0, fill = 0, previous = 0;  // step s: stage i, its fill-th use; step s - 1's stage
  for (Cursor at = first_step(p); at.tile_index < p.total_tiles; at = next_step(p, at), ++s) {
    // Step s - 1's stage goes back to the producer once its MMAs are done: before the epilogue at a new tile (so
    // that the producer is not held up by it), else once at most step s's group runs.
    const auto release_previous = [&] {
      if (s >= 1) {
        wgmma::publish_stores();  // orders this thread's accesses before the producer's refill (one fence a step)
        bulk::arrive(&empty[previous]);
      }
    };
    const bool new_tile = at.k == 0 && pending;
    if (new_tile) {  // the last tile's accumulators leave before this one's first MMA
      wgmma::wait<0>();
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) wgmma::pin(acc[mb]);
      release_previous();
      store_tile_cout_rows<Math, MB>(p, multiplied, wg, acc, thread, smem + ws_epilogue_offset(p));
    }
    bulk::wait(&full[i], fill & 1);  // after the epilogue, which does not read the stage
    wgmma::fence();
    multiply_step_cout_rows<Math, MB>(p, smem + i * p.stage_bytes, p.skew, at.k == 0, wg, acc);
    wgmma::commit();
    wgmma::wait<1>();
    if (!new_tile) release_previous();
    multiplied = at.tile;
    pending = true;
    previous = i;
    if (++i == p.stages) i = 0, ++fill;
  }
  wgmma::wait<0>();
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) wgmma::pin(acc[mb]);
  if (pending) store_tile_cout_rows<Math, MB>(p, multiplied, wg, acc, thread, smem + ws_epilogue_offset(p));
}

template <class Math, int MB, bool kQuartets>
__global__ void __launch_bounds__(kWsThreads, 1) conv_transpose_shift_gemm_ws_kernel(const __grid_constant__ Params p) {
#if CONVOPS_HAS_WGMMA
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kWsMaxStages], empty[kWsMaxStages];
  // The warpgroup, uniform across the warp: 0 the producer, 1 and 2 the MMA warpgroups.
  const int role = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.stages; ++i) {
      bulk::barrier_init(&full[i], kProducerThreads);
      bulk::barrier_init(&empty[i], kThreads);
    }
    bulk::fence_for_async_proxy();
  }
  __syncthreads();
  if (role == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    produce<Math, kQuartets>(p, smem, full, empty);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMmaRegisters));
    consume<Math, MB>(p, smem, full, empty, role - 1);
  }
#else
  __trap();  // launch() runs this kernel only where its machine code is sm_90a
#endif
}

}  // namespace shift_gemm
}  // namespace cuda
}  // namespace convops
