// The IVF search and retrieval for __half keys.
#include "ivf/ivf_retrieve.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_SEARCH_INSTANTIATE(__half)
CUDAOPS_IVF_PROBE_INSTANTIATE(__half)
}  // namespace cudaops::detail::ivf
