// The IVF index's decode attention for __half keys.
#include "ivf/ivf_attention.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_ATTENTION_INSTANTIATE(__half)
}  // namespace cudaops::detail::ivf
