// Top-k of float rows.
#include "topk/topk_kernels.cuh"

CUDAOPS_TOPK_INSTANTIATE(float)

namespace cudaops::detail::topk {
const void* topk_family_kernel() {
  return reinterpret_cast<const void*>(topk_values_kernel<float, true, kWideThreads>);
}
}  // namespace cudaops::detail::topk
