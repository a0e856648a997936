// The IVF search for __nv_bfloat16 keys.
#include "ivf/ivf_search.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_SEARCH_INSTANTIATE(__nv_bfloat16)
}  // namespace cudaops::detail::ivf
