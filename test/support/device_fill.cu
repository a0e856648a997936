#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device_fill.h"
#include "harness/cuda_util.h"

namespace cudaops::testing {
namespace {

__device__ void store(float* p, float v) {
  *p = v;
}
__device__ void store(__half* p, float v) {
  *p = __float2half_rn(v);
}
__device__ void store(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

template <typename T>
__global__ void fill_kernel(T* data, int64_t n, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    store(data + i, hashed_value(seed, i));
  }
}

template <typename T>
Status launch(void* d_data, int64_t n, uint64_t seed, cudaStream_t stream) {
  fill_kernel<T><<<4096, 256, 0, stream>>>(static_cast<T*>(d_data), n, seed);
  return harness::cuda_check(cudaGetLastError(), "fill_hashed launch");
}

}  // namespace

Status fill_hashed(void* d_data, DType dtype, int64_t n, uint64_t seed, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return launch<float>(d_data, n, seed, stream);
    case DType::kFloat16:
      return launch<__half>(d_data, n, seed, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(d_data, n, seed, stream);
    default:
      return Status(StatusCode::kUnsupportedDtype, "fill_hashed: float dtypes only");
  }
}

}  // namespace cudaops::testing
