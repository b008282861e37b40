#include "cuda/layout_transpose.cuh"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/checks.h"

namespace convops {
namespace cuda {
namespace {

constexpr int kTileRows = 64;   // a tile of 64 source rows x 32 source columns through shared memory: a 49-pixel
constexpr int kTileCols = 32;   // plane's channel row is then written whole by one CTA (no sector shared by two)
constexpr int kThreadRows = 8;  // a block of 32 x 8 threads
constexpr int kMaxGridY = 65535;

// dst[b][c][r] = src[b][r][c] (+ bias[c]) for b < batches, r < rows, c < cols: a batch of row-major matrices
// transposed. Both global sides are read and written along their contiguous dimension (a warp's 32 lanes on 32
// consecutive elements); the tile's odd pitch keeps its column reads free of bank conflicts.
template <typename scalar_t>
__global__ void __launch_bounds__(kTileCols * kThreadRows)
    batched_transpose_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ dst,
                             const scalar_t* __restrict__ bias, int64_t batches, int rows, int cols, int col_tiles) {
  __shared__ float tile[kTileRows][kTileCols + 1];
  const int r0 = static_cast<int>(blockIdx.x / col_tiles) * kTileRows;
  const int c0 = static_cast<int>(blockIdx.x % col_tiles) * kTileCols;
  const int64_t matrix = int64_t{rows} * cols;
  for (int64_t b = blockIdx.y; b < batches; b += gridDim.y) {
    const scalar_t* __restrict__ in = src + b * matrix;
    scalar_t* __restrict__ out = dst + b * matrix;
    const int c = c0 + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kTileRows / kThreadRows; ++k) {
      const int i = threadIdx.y + k * kThreadRows, r = r0 + i;
      if (r < rows && c < cols) tile[i][threadIdx.x] = static_cast<float>(in[int64_t{r} * cols + c]);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileCols / kThreadRows; ++k) {
      const int j = threadIdx.y + k * kThreadRows, cc = c0 + j;
      if (cc >= cols) continue;
      const float add = bias != nullptr ? static_cast<float>(bias[cc]) : 0.0f;
#pragma unroll
      for (int h = 0; h < kTileRows; h += kTileCols) {
        const int r = r0 + h + threadIdx.x;
        if (r < rows) out[int64_t{cc} * rows + r] = static_cast<scalar_t>(tile[h + threadIdx.x][j] + add);
      }
    }
    __syncthreads();
  }
}

// Transposes each of `batches` (rows x cols) matrices of src into dst (both contiguous, same dtype), adding bias[c].
void batched_transpose(const at::Tensor& src, at::Tensor& dst, const at::Tensor* bias, int64_t batches, int64_t rows,
                       int64_t cols) {
  const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols, row_tiles = (rows + kTileRows - 1) / kTileRows;
  const dim3 grid(static_cast<unsigned>(col_tiles * row_tiles),
                  static_cast<unsigned>(std::min<int64_t>(batches, kMaxGridY)));
  const dim3 block(kTileCols, kThreadRows);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(src.device().index());
  const auto launch = [&](auto element) {
    using scalar_t = decltype(element);
    batched_transpose_kernel<scalar_t><<<grid, block, 0, stream>>>(
        src.const_data_ptr<scalar_t>(), dst.mutable_data_ptr<scalar_t>(),
        bias != nullptr ? bias->const_data_ptr<scalar_t>() : nullptr, batches, static_cast<int>(rows),
        static_cast<int>(cols), static_cast<int>(col_tiles));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  switch (src.scalar_type()) {  // the dtypes transpose_applies admits
    case at::kFloat: launch(float{}); break;
    case at::kHalf: launch(at::Half{}); break;
    case at::kBFloat16: launch(at::BFloat16{}); break;
    default: TORCH_INTERNAL_ASSERT(false, "batched_transpose: unsupported dtype ", src.scalar_type());
  }
}

// Whether the tiled transpose takes an (N, C, positions...) tensor: 4-D or 5-D CUDA fp32 / fp16 / bf16 whose
// per-image matrix (C x positions) has extents in int and fewer than 2^31 tiles.
bool transpose_applies(const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  if (!t.is_cuda() || (t.dim() != 4 && t.dim() != 5) || t.numel() == 0) return false;
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) return false;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  const int64_t positions = t.numel() / (t.size(0) * t.size(1));
  // Tiles of the grid, either way round, are at most this many (a tile spans at least 32 each way).
  const int64_t tiles = ((t.size(1) + kTileCols - 1) / kTileCols) * ((positions + kTileCols - 1) / kTileCols);
  return t.size(1) < kIntMax && positions < kIntMax && tiles < kIntMax;
}

at::MemoryFormat channels_last_format(const at::Tensor& t) {
  return t.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
}

}  // namespace

at::Tensor channels_last_copy(const at::Tensor& input) {
  const at::MemoryFormat format = channels_last_format(input);
  if (!transpose_applies(input) || !input.is_contiguous()) return input.contiguous(format);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(format));
  const int64_t n = input.size(0), c = input.size(1), positions = input.numel() / (n * c);
  batched_transpose(input, out, nullptr, n, c, positions);  // (C x positions) -> (positions x C) per image
  return out;
}

at::Tensor channels_first_copy(const at::Tensor& input, const std::optional<at::Tensor>& bias) {
  const bool has_bias = bias.has_value() && bias->defined();
  const bool dense_bias = !has_bias || (bias->is_contiguous() && bias->dim() == 1 &&
                                        bias->numel() == input.size(1) && bias->scalar_type() == input.scalar_type() &&
                                        bias->device() == input.device());
  if (!transpose_applies(input) || !input.is_contiguous(channels_last_format(input)) || !dense_bias) {
    // ATen's copy and add, out of place: contiguous() returns an NCHW-dense input as it is, which must not be
    // written.
    if (!has_bias) return input.contiguous();
    std::vector<int64_t> shape(input.dim(), 1);
    shape[1] = input.size(1);
    return at::add(input.contiguous(), bias->view(shape));
  }
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t n = input.size(0), c = input.size(1), positions = input.numel() / (n * c);
  batched_transpose(input, out, has_bias ? &*bias : nullptr, n, positions, c);  // (positions x C) -> (C x positions)
  return out;
}

}  // namespace cuda
}  // namespace convops
