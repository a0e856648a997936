// Top-k of float rows.
#include "core/kernel_families.h"
#include "topk/topk_kernels.cuh"

CUDAOPS_TOPK_INSTANTIATE(float)

namespace cudaops::detail::topk {
namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(topk_values_kernel<float, true, kWideThreads>);
}
CUDAOPS_KERNEL_FAMILY("topk", "topk_f32.cu", family_kernel);
}  // namespace
}  // namespace cudaops::detail::topk
