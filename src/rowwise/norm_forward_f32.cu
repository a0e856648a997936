// The forward norms for float.
#include "rowwise/norm_forward.cuh"

CUDAOPS_NORM_FORWARD_INSTANTIATE(float)

namespace cudaops::detail::rowwise {
const void* norm_family_kernel() {
  return reinterpret_cast<const void*>(norm_streamed<Norm::kRms, float, kVec16<float>, 1>);
}
}  // namespace cudaops::detail::rowwise
