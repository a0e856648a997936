// The forward norms for float.
#include "core/kernel_families.h"
#include "rowwise/norm_forward.cuh"

CUDAOPS_NORM_FORWARD_INSTANTIATE(float)

namespace cudaops::detail::rowwise {
namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(norm_streamed<Norm::kRms, float, kVec16<float>, 1>);
}
CUDAOPS_KERNEL_FAMILY("norm", "norm_forward_f32.cu", family_kernel);
}  // namespace
}  // namespace cudaops::detail::rowwise
