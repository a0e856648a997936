#include "harness/cuda_util.h"

namespace cudaops::harness {

Status cuda_check(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status();
  return Status(StatusCode::kCudaError,
                what + ": " + cuda_error_description(error) + " (" + cudaGetErrorName(error) + ")",
                static_cast<int>(error));
}

bool cuda_device_usable(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    if (why)
      *why = std::string(cuda_error_description(error)) + " (" + cudaGetErrorName(error) + ")";
    cudaGetLastError();
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device is visible";
    return false;
  }
  return true;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status Stream::create() {
  return cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

}  // namespace cudaops::harness
