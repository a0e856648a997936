#include "core/launch.h"

#include <string>

namespace cudaops::detail {

Status cuda_status(cudaError_t error, const char* op, const char* what) {
  return Status(StatusCode::kCudaError,
                std::string(op) + ": " + what + ": " + cudaGetErrorString(error) + " (" +
                    cudaGetErrorName(error) + ")",
                static_cast<int>(error));
}

Status cluster_image(const char* op, const void* kernel, cudaFuncAttributes* attributes, bool* ok) {
  *ok = false;
  int device = 0;
  int major = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  if (major < 9) return Status();
  error = cudaFuncGetAttributes(attributes, kernel);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the kernel");
  *ok = attributes->ptxVersion >= 90 && attributes->binaryVersion >= 90;
  return Status();
}

Status check_launch(const char* op, cudaStream_t stream) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return cuda_status(error, op, "kernel launch failed");
#if defined(CUDAOPS_DEBUG_SYNC)
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  error = cudaStreamIsCapturing(stream, &capture);
  if (error != cudaSuccess) return cuda_status(error, op, "cudaStreamIsCapturing failed");
  if (capture == cudaStreamCaptureStatusNone) {
    error = cudaStreamSynchronize(stream);
    if (error != cudaSuccess) return cuda_status(error, op, "kernel failed (debug sync)");
  }
#else
  (void)stream;
#endif
  return Status();
}

}  // namespace cudaops::detail
