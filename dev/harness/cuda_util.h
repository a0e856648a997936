#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cudaops/status.h"

namespace cudaops::harness {

/// kCudaError status for a failed runtime call, naming what was attempted; success otherwise.
Status cuda_check(cudaError_t error, const std::string& what);

/// Whether a CUDA device can be used; `why` says what is missing when it cannot
/// (no driver, no device, a driver older than the runtime).
bool cuda_device_usable(std::string* why);

/// An owned stream (non-blocking with respect to the legacy default stream).
class Stream {
 public:
  Stream() = default;
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Status create();
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace cudaops::harness
