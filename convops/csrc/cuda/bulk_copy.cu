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

bool encode_tensor_map_3d(CUtensorMap* map, CUtensorMapDataType type, const void* data, const uint64_t (&dims)[3],
                          const uint64_t (&strides)[2], const uint32_t (&box)[3]) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_entry_point();
  if (encode == nullptr) return false;
  const cuuint64_t global_dims[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t global_strides[2] = {strides[0], strides[1]};
  const cuuint32_t box_dims[3] = {box[0], box[1], box[2]};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode(map, type, 3, const_cast<void*>(data), global_dims, global_strides, box_dims, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace bulk
}  // namespace cuda
}  // namespace convops
