// The IVF search and retrieval for __half keys.
#include "core/kernel_families.h"
#include "ivf/ivf_retrieve.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_SEARCH_INSTANTIATE(__half)
CUDAOPS_IVF_PROBE_INSTANTIATE(__half)
namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(cluster_scores_mma_kernel<__half>);
}
CUDAOPS_KERNEL_FAMILY("ivf_search", "ivf_search_f16.cu", family_kernel);
}  // namespace
}  // namespace cudaops::detail::ivf
