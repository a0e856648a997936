// The IVF index's decode attention for __nv_bfloat16 keys.
#include "ivf/ivf_attention.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_ATTENTION_INSTANTIATE(__nv_bfloat16)
}  // namespace cudaops::detail::ivf
