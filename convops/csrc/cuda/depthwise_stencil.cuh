// Device code of the general (tiled) depthwise CUDA kernel in depthwise_conv2d_kernel.cu, which serves layouts and
// parameters the row-streaming and plane-block kernels do not: the problem description, the staging of a
// zero-padded input tile into shared memory, and the depthwise tap sum over such a tile. A CTA copies the input
// rectangle that its output tile reads (halo and padding included, padding as zeros) into shared memory once, with
// coalesced reads and no per-element index division, and then every output reads its taps from shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace convops {
namespace cuda {
namespace depthwise {

// The depthwise stage's geometry, in the int range that per-plane indices need (tensor offsets are 64-bit and
// built from the int64 strides below).
struct Geometry {
  int in_h, in_w, out_h, out_w;
  int kernel_h, kernel_w;
  int stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int multiplier;  // output channel co reads input channel co / multiplier
};

// Element strides of an NCHW-indexed tensor of any memory layout.
struct Strides4d {
  int64_t n, c, h, w;
};

// Extent of the input rectangle that an out_extent-long run of outputs reads along one dimension.
__host__ __device__ inline int input_span(int out_extent, int kernel, int stride, int dilation) {
  return (out_extent - 1) * stride + (kernel - 1) * dilation + 1;
}

// Copies rows [iy0, iy0 + rows) x columns [ix0, ix0 + cols) of one input plane into tile (row pitch `pitch`),
// converting to the accumulation type and writing zeros outside the image (the convolution's padding). For wide
// rectangles (the depthwise kernel's 130-column rows): warps take whole rows and lanes walk along them, so reads are
// coalesced whenever the input's W stride is 1 and no index arithmetic is spent per element. (On an H200 this ran
// the seed 3x3 problem in 0.83 ms; a per-element walk took 1.06 ms there, being ALU-bound.)
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void stage_rows(acc_t* __restrict__ tile, int pitch, const scalar_t* __restrict__ plane,
                                           int64_t stride_h, int64_t stride_w, int in_h, int in_w, int iy0, int ix0,
                                           int rows, int cols, int warp, int num_warps, int lane) {
  for (int r = warp; r < rows; r += num_warps) {
    const int iy = iy0 + r;
    const bool row_inside = iy >= 0 && iy < in_h;
    const scalar_t* __restrict__ src = plane + static_cast<int64_t>(iy) * stride_h;
    acc_t* __restrict__ dst = tile + r * pitch;
#pragma unroll 4
    for (int c = lane; c < cols; c += 32) {
      const int ix = ix0 + c;
      dst[c] = row_inside && ix >= 0 && ix < in_w ? static_cast<acc_t>(src[static_cast<int64_t>(ix) * stride_w])
                                                  : acc_t(0);
    }
  }
}

// Kernel extent and step along one dimension: compile-time when the kernel is specialised (KH, KW > 0 imply
// stride 1 and dilation 1), read from the geometry otherwise.
template <int KH, int KW>
struct Taps {
  static constexpr bool kFixed = KH > 0 && KW > 0;
  __device__ __forceinline__ static int kernel_h(const Geometry& g) { return kFixed ? KH : g.kernel_h; }
  __device__ __forceinline__ static int kernel_w(const Geometry& g) { return kFixed ? KW : g.kernel_w; }
  __device__ __forceinline__ static int stride_h(const Geometry& g) { return kFixed ? 1 : g.stride_h; }
  __device__ __forceinline__ static int stride_w(const Geometry& g) { return kFixed ? 1 : g.stride_w; }
  __device__ __forceinline__ static int dilation_h(const Geometry& g) { return kFixed ? 1 : g.dilation_h; }
  __device__ __forceinline__ static int dilation_w(const Geometry& g) { return kFixed ? 1 : g.dilation_w; }
};

// The depthwise stencil: `init` (the bias) plus the kernel window of one output whose top-left tap sits at `origin`
// in a staged tile; weights is the channel's (kh, kw) filter, row-major. The taps are accumulated in ATen's order
// (bias first, then row by row, one fused multiply-add each), so fp32 results are bitwise those of PyTorch's own
// depthwise kernel, as the row-streaming and plane-block kernels are too (the separable op's mixed path feeds that
// intermediate to ATen's 1x1 and relies on it being eager's).
template <int KH, int KW, typename acc_t>
__device__ __forceinline__ acc_t tap_sum(acc_t init, const acc_t* __restrict__ origin, int pitch,
                                         const acc_t* __restrict__ weights, const Geometry& g) {
  using T = Taps<KH, KW>;
  const int kh = T::kernel_h(g), kw = T::kernel_w(g);
  const int row_step = T::dilation_h(g) * pitch, col_step = T::dilation_w(g);
  acc_t sum = init;
#pragma unroll
  for (int ky = 0; ky < kh; ++ky) {
#pragma unroll
    for (int kx = 0; kx < kw; ++kx) {
      sum = fma(weights[ky * kw + kx], origin[ky * row_step + kx * col_step], sum);
    }
  }
  return sum;
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
