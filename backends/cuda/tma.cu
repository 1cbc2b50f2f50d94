// Tensor maps for the TMA copies (tma.cuh), made on the host. Under nvcc through the driver's
// cuTensorMapEncodeTiled, reached with cudaGetDriverEntryPointByVersion so that nothing links
// libcuda; under the emulator, the fields its copy reads.
#include "backends/cuda/tma.cuh"

#include <string>

#ifndef KESTREL_CUDA_EMULATE
#include <cudaTypedefs.h>
#endif

namespace kestrel::cuda {

Status encode_tma_2d(TmaMap* map, const void* base, DType type, int64_t inner, int64_t rows, int64_t row_bytes, int box_inner,
                     int box_rows, bool swizzle128) {
  if (type != DType::F16 && type != DType::BF16)
    return Error(KESTREL_ERR_INTERNAL, "cuda: a tensor map of " + std::string(dtype_name(type)));
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || row_bytes % 16 != 0 || inner <= 0 || rows <= 0 ||
      (swizzle128 && box_inner * 2 != 128))
    return Error(KESTREL_ERR_INTERNAL, "cuda: a tensor map needs 16-byte aligned rows (and 128-byte boxes to swizzle)");
#ifdef KESTREL_CUDA_EMULATE
  *map = TmaMap{};
  map->base = static_cast<const uint8_t*>(base);
  map->elem_bytes = 2;
  map->dims[0] = static_cast<uint64_t>(inner), map->dims[1] = static_cast<uint64_t>(rows);
  map->row_bytes = static_cast<uint64_t>(row_bytes);
  map->box[0] = static_cast<uint32_t>(box_inner), map->box[1] = static_cast<uint32_t>(box_rows);
  map->swizzle128 = swizzle128;
  return Status::Ok();
#else
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t steps[2] = {1, 1};
  const CUresult r = encode(map, type == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                            const_cast<void*>(base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return Error(KESTREL_ERR_BACKEND, "cuda: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return Status::Ok();
#endif
}

}  // namespace kestrel::cuda
