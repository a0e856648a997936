// The IVF search for __half keys.
#include "ivf/ivf_search.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_SEARCH_INSTANTIATE(__half)
}  // namespace cudaops::detail::ivf
