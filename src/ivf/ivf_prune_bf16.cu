// The IVF build's pruned global pass for __nv_bfloat16 keys.
#include "ivf/ivf_prune.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_PRUNE_INSTANTIATE(__nv_bfloat16)
}  // namespace cudaops::detail::ivf
