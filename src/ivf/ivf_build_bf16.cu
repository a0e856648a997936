// The IVF build for __nv_bfloat16 keys.
#include "ivf/ivf_build.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_INSTANTIATE(__nv_bfloat16)
}  // namespace cudaops::detail::ivf
