// The IVF build for __half keys.
#include "ivf/ivf_build.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_INSTANTIATE(__half)
}  // namespace cudaops::detail::ivf
