#include "cudaops/version.h"

#include <cuda_runtime_api.h>

#include "build_config.h"

namespace cudaops {

const char* version_string() noexcept {
  return CUDAOPS_VERSION_STRING;
}

const char* build_cuda_architectures() noexcept {
  return CUDAOPS_CUDA_ARCHITECTURES;
}

int build_cuda_runtime_version() noexcept {
  return CUDART_VERSION;
}

}  // namespace cudaops
