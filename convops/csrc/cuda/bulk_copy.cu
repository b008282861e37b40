// Host side of bulk_copy.cuh: tensor maps, encoded through the driver's entry point (the runtime links no libcuda).
#include "cuda/bulk_copy.cuh"

#include <cudaTypedefs.h>

namespace convops {
namespace cuda {
namespace bulk {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry_point() {
  static const PFN_cuTensorMapEncodeTiled_v12000 entry = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
    const cudaError_t error =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status);
#else
    const cudaError_t error = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &status);
#endif
    if (error != cudaSuccess || status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // not sticky; leave no error behind for the next launch check
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return entry;
}

}  // namespace

bool encode_tensor_map(CUtensorMap* map, CUtensorMapDataType type, const void* data, int rank, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle) {
  constexpr int kMaxRank = 5;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_entry_point();
  if (encode == nullptr || rank < 1 || rank > kMaxRank) return false;
  cuuint64_t global_dims[kMaxRank], global_strides[kMaxRank - 1];
  cuuint32_t box_dims[kMaxRank], element_strides[kMaxRank];
  for (int i = 0; i < rank; ++i) {
    global_dims[i] = dims[i];
    box_dims[i] = box[i];
    element_strides[i] = 1;
    if (i > 0) global_strides[i - 1] = strides[i - 1];
  }
  return encode(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(data), global_dims, global_strides,
                box_dims, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace bulk
}  // namespace cuda
}  // namespace convops
