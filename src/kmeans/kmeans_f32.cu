// Batched k-means of float points.
#include "core/kernel_families.h"
#include "engine/kmeans_fit.cuh"

CUDAOPS_KMEANS_INSTANTIATE(float)

namespace cudaops::detail::kmeans {
namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(means_kernel<float>);
}
CUDAOPS_KERNEL_FAMILY("kmeans", "kmeans_f32.cu", family_kernel);
}  // namespace
}  // namespace cudaops::detail::kmeans
