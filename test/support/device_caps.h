#pragma once

// What the current device can run, for GPU tests that skip what it cannot.
#include <cuda_runtime_api.h>

namespace cudaops::testing {

/// Compute capability 7.5 or newer: what k-means, and the IVF index built on it, need.
inline bool HasTensorCores() {
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
         major * 10 + minor >= 75;
}

}  // namespace cudaops::testing
