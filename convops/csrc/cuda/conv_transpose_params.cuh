// What the host tells the conv_transpose kernel about one call, and the per-phase arithmetic both sides share.
//
// Sub-pixel (phase) decomposition, per spatial dimension with stride s, dilation d, padding p, kernel K:
// output o receives input i through tap k when o + p = i*s + k*d. Writing o = q*s + r (r in [0, s) is the phase),
// the taps that reach phase r are k = k0 + j*tap_step (tap_step = s / gcd(s, d)) and they read input
// i = q + off0 - j*offset_step (offset_step = d / gcd(s, d)). So each phase is a stride-1 gather over q with a
// small set of shifted taps: no zero insertion, no wasted multiply.
#pragma once

#include <cstdint>

namespace convops {
namespace cuda {

struct ConvTransposeParams {
  const void* input;   // (N, G * cin_g, D, H, W), any strides (2-D calls come with D = 1)
  const void* weight;  // transformed: (G, KD, KH, KW, cin_words, cout_pad) words, see conv_transpose_kernel.cu
  const void* bias;    // (G * cout_g) or null
  void* output;        // (N, G * cout_g, OD, OH, OW), any strides
  int batch, groups, cin_g, cout_g;
  int in_size[3], out_size[3], kernel[3], stride[3], padding[3], dilation[3];
  int tap_step[3], offset_step[3];
  int64_t in_stride[5], out_stride[5];
  int cin_words;          // channel words per group in the transformed weight (a multiple of `chunk`)
  int cout_pad;           // output channels per group in the transformed weight (a multiple of BN)
  int tile_log2[3];       // output tile of one block, in phase coordinates q: a power of two per dimension
  int lane_axis;          // tensor-core tile (MmaTile): the axis of a fragment's 8 rows, 0 (d) or 1 (h)
  int tiles[3];           // tiles per dimension (for the largest phase)
  int group_taps[3];      // taps per dimension that share one input brick (all of them when it fits)
  int brick[3];           // allocated brick extents: tile + (group_taps - 1) * offset_step; for the tensor-core
                          // tile those after the lane axis odd, so that its 8 rows hit 8 bank octets
  int brick_plane;        // words per channel-word plane of the brick, padded against bank conflicts
  int chunk;              // channel words per pass over the brick (a multiple of 8)
  int paired_brick;       // 16-bit input whose rows are copied two columns at a time (load_brick)
  int stage_words;        // shared memory words of one pipeline stage: brick + weights of one pass
  int co_blocks;          // blocks of BN output channels per group
  int64_t total_tiles;
};

// The part of one phase along one dimension.
struct PhaseDim {
  int q_count;  // outputs of this phase: o = q * s + r for q in [0, q_count)
  int k0;       // first tap of the phase
  int taps;     // taps of the phase (0: the outputs are bias alone)
  int off0;     // input offset of tap k0: i = q + off0 - j * offset_step
};

__host__ __device__ inline PhaseDim phase_dim(int r, int out, int kernel, int s, int p, int d, int tap_step) {
  PhaseDim ph{0, 0, 0, 0};
  if (r >= out) return ph;
  ph.q_count = (out - r + s - 1) / s;
  const int first_taps = kernel < tap_step ? kernel : tap_step;
  for (int k = 0; k < first_taps; ++k) {
    const int a = r + p - k * d;
    if (a % s == 0) {
      ph.k0 = k;
      ph.taps = (kernel - 1 - k) / tap_step + 1;
      ph.off0 = a / s;
      break;
    }
  }
  return ph;
}

}  // namespace cuda
}  // namespace convops
