// The IVF build for __half keys.
#include "core/kernel_families.h"
#include "ivf/ivf_build.cuh"

namespace cudaops::detail::ivf {
CUDAOPS_IVF_INSTANTIATE(__half)
namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(head_sums_kernel<__half>);
}
CUDAOPS_KERNEL_FAMILY("ivf_build", "ivf_build_f16.cu", family_kernel);
}  // namespace
}  // namespace cudaops::detail::ivf
