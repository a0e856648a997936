// The IVF build's pruned global pass for __half keys.
#include "ivf/ivf_prune.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_PRUNE_INSTANTIATE(__half)
}  // namespace cudaops::detail::ivf
