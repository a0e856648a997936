// The IVF search and retrieval for __nv_bfloat16 keys.
#include "ivf/ivf_retrieve.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_SEARCH_INSTANTIATE(__nv_bfloat16)
CUDAOPS_IVF_PROBE_INSTANTIATE(__nv_bfloat16)
}  // namespace cudaops::detail::ivf
