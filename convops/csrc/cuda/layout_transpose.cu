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

// The same transpose in 16-byte chunks, for matrices whose rows and columns are whole chunks (V = 16 / element
// size: 4 fp32, 8 fp16 / bf16) on 16-byte-aligned storage. The element-wise kernel above moves 2-4 bytes a lane and
// instruction; at 16-bit it reached 1.8 TB/s on UNet's NCHW -> NHWC copies where Inductor's Triton transpose reached
// 3.5 (H200, 2026-11-28 16:10 UTC, tools/probe/column_kernels.py), and those copies were all that kept the op's
// channels-last ATen path behind Inductor's graph around the same cuDNN kernel.
//
// A CTA takes a tile of 16 x 16 blocks of V x V elements. Each thread loads one block (V source rows, one chunk
// each: a warp reads 256-byte runs of two source rows), transposes it in registers into V chunks of destination rows
// (fp32: a choice of words; 16-bit: byte permutes of word pairs), adds the bias, and writes the chunks to shared
// memory as [destination row][row chunk]; after the barrier a warp stores two destination rows' 256-byte runs. The
// row chunk's slot is XOR-swizzled by the block column (q & 7), so that the eight lanes of a 16-byte shared access
// phase, eight block columns when writing and eight row chunks when reading, fall on eight different bank groups.
constexpr int kChunkBlocks = 16;  // a tile is kChunkBlocks x kChunkBlocks blocks of V x V elements
constexpr int kChunkThreads = kChunkBlocks * kChunkBlocks;
// CTAs an SM the register cap asks for: fp32 needs 52 registers a thread, 16-bit 75 (its eight chunks a block).
template <typename scalar_t>
constexpr int chunk_ctas_per_sm() {
  return sizeof(scalar_t) == 4 ? 4 : 3;
}

template <typename scalar_t>
constexpr int chunk_elements() {
  return 16 / static_cast<int>(sizeof(scalar_t));
}

// Word i of a chunk, and the chunk of four words; i is a constant after unrolling, so nothing is addressed in memory
// (indexing a uint4 through a pointer put the block in local memory: 144 bytes of spills at 16-bit).
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Column j of a V x V block whose rows are `row` (V chunks): the chunk holding rows 0..V-1 of that column.
template <typename scalar_t>
__device__ __forceinline__ uint4 block_column(const uint4 (&row)[chunk_elements<scalar_t>()], int j) {
  if constexpr (sizeof(scalar_t) == 4) {
    return make_uint4(word(row[0], j), word(row[1], j), word(row[2], j), word(row[3], j));
  } else {
    // Word k of the column pairs rows 2k and 2k + 1: element j of each sits in word j / 2, low half for even j.
    const uint32_t selector = (j & 1) != 0 ? 0x7632u : 0x5410u;
    const auto pair = [&](int k) {
      return __byte_perm(word(row[2 * k], j / 2), word(row[2 * k + 1], j / 2), selector);
    };
    return make_uint4(pair(0), pair(1), pair(2), pair(3));
  }
}

// Adds `add` to each element of a word, rounded once to the element type (as ATen adds a bias in float).
template <typename scalar_t>
__device__ __forceinline__ uint32_t word_plus(uint32_t w, float add) {
  if constexpr (sizeof(scalar_t) == 4) {
    return __float_as_uint(__uint_as_float(w) + add);
  } else {
    const auto plus = [add](uint16_t bits) {
      scalar_t e;
      e.x = bits;
      return static_cast<uint32_t>(scalar_t(static_cast<float>(e) + add).x);
    };
    return plus(static_cast<uint16_t>(w & 0xffffu)) | (plus(static_cast<uint16_t>(w >> 16)) << 16);
  }
}

template <typename scalar_t>
__device__ __forceinline__ uint4 chunk_plus(uint4 c, float add) {
  return make_uint4(word_plus<scalar_t>(c.x, add), word_plus<scalar_t>(c.y, add), word_plus<scalar_t>(c.z, add),
                    word_plus<scalar_t>(c.w, add));
}

template <typename scalar_t>
__global__ void __launch_bounds__(kChunkThreads, chunk_ctas_per_sm<scalar_t>())
    batched_transpose_chunks_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ dst,
                                    const scalar_t* __restrict__ bias, int64_t batches, int rows, int cols,
                                    int col_tiles) {
  constexpr int V = chunk_elements<scalar_t>();
  constexpr int kSide = kChunkBlocks * V;  // rows and columns of a tile: 64 fp32, 128 16-bit
  __shared__ uint4 tile[kSide][kChunkBlocks];  // [destination row][row chunk, swizzled]: 16 KB fp32, 32 KB 16-bit
  // 64-bit positions: a tile's last rows and columns may lie past int's range where rows or cols come near it.
  const int64_t r0 = int64_t{blockIdx.x / col_tiles} * kSide;
  const int64_t c0 = int64_t{blockIdx.x % col_tiles} * kSide;
  const int q = static_cast<int>(threadIdx.x) % kChunkBlocks;  // this thread's block column (loads)
  const int a = static_cast<int>(threadIdx.x) / kChunkBlocks;  // and block row
  const int64_t load_row = r0 + a * V, load_col = c0 + q * V;
  const bool loads = load_row < rows && load_col < cols;  // whole chunks: rows and cols are multiples of V
  const int64_t matrix = int64_t{rows} * cols;
  // One image a CTA row of the grid (y, then z past 65535): a loop over images let ptxas hoist every address out of
  // it and spill (88 bytes at 16-bit).
  const int64_t b = int64_t{blockIdx.z} * gridDim.y + blockIdx.y;
  if (b >= batches) return;
  if (loads) {
    const scalar_t* __restrict__ in = src + b * matrix + load_row * cols + load_col;
    uint4 row[V];
#pragma unroll
    for (int i = 0; i < V; ++i) row[i] = *reinterpret_cast<const uint4*>(in + int64_t{i} * cols);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      uint4 column = block_column<scalar_t>(row, j);
      if (bias != nullptr) column = chunk_plus<scalar_t>(column, static_cast<float>(bias[load_col + j]));
      tile[q * V + j][a ^ (q & 7)] = column;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kSide * kChunkBlocks / kChunkThreads; ++k) {
    const int slot = k * kChunkThreads + static_cast<int>(threadIdx.x);
    const int out_row = slot / kChunkBlocks, chunk = slot % kChunkBlocks;  // a destination row, a row chunk of it
    const int64_t c = c0 + out_row, r = r0 + chunk * V;
    if (c < cols && r < rows) {
      *reinterpret_cast<uint4*>(dst + b * matrix + c * rows + r) =
          tile[out_row][chunk ^ ((out_row / V) & 7)];
    }
  }
}

// Whether the chunked kernel takes these matrices: whole chunks each way and 16-byte-aligned storage.
bool chunks_apply(const at::Tensor& src, const at::Tensor& dst, int64_t batches, int64_t rows, int64_t cols) {
  const int64_t v = 16 / src.element_size();
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return rows % v == 0 && cols % v == 0 && aligned(src.const_data_ptr()) && aligned(dst.const_data_ptr()) &&
         batches <= int64_t{kMaxGridY} * kMaxGridY;  // (a bias is dense here: channels_first_copy's dense_bias)
}

// Transposes each of `batches` (rows x cols) matrices of src into dst (both contiguous, same dtype), adding bias[c]:
// in 16-byte chunks where chunks_apply, else element by element.
void batched_transpose(const at::Tensor& src, at::Tensor& dst, const at::Tensor* bias, int64_t batches, int64_t rows,
                       int64_t cols) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(src.device().index());
  const unsigned grid_y = static_cast<unsigned>(std::min<int64_t>(batches, kMaxGridY));
  const bool chunked = chunks_apply(src, dst, batches, rows, cols);
  const auto launch = [&](auto element) {
    using scalar_t = decltype(element);
    const scalar_t* bias_data = bias != nullptr ? bias->const_data_ptr<scalar_t>() : nullptr;
    if (chunked) {
      constexpr int64_t side = kChunkBlocks * chunk_elements<scalar_t>();
      const int64_t col_tiles = (cols + side - 1) / side, row_tiles = (rows + side - 1) / side;
      const auto grid_z = static_cast<unsigned>((batches + grid_y - 1) / grid_y);
      batched_transpose_chunks_kernel<scalar_t><<<dim3(static_cast<unsigned>(col_tiles * row_tiles), grid_y, grid_z),
                                                  kChunkThreads, 0, stream>>>(
          src.const_data_ptr<scalar_t>(), dst.mutable_data_ptr<scalar_t>(), bias_data, batches,
          static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(col_tiles));
    } else {
      const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols, row_tiles = (rows + kTileRows - 1) / kTileRows;
      batched_transpose_kernel<scalar_t>
          <<<dim3(static_cast<unsigned>(col_tiles * row_tiles), grid_y), dim3(kTileCols, kThreadRows), 0, stream>>>(
              src.const_data_ptr<scalar_t>(), dst.mutable_data_ptr<scalar_t>(), bias_data, batches,
              static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(col_tiles));
    }
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
