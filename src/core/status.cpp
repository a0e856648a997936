#include "cudaops/status.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

namespace cudaops {

namespace {

// Whether the driver's library can be loaded at all (checked once).
bool driver_library_present() {
  static const bool present = [] {
    void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen("libcuda.so.1", RTLD_LAZY);
    if (handle == nullptr) return false;
    dlclose(handle);
    return true;
  }();
  return present;
}

}  // namespace

const char* cuda_error_description(int cuda_error) noexcept {
  const auto error = static_cast<cudaError_t>(cuda_error);
  if (error == cudaErrorInsufficientDriver && !driver_library_present()) {
    return "no NVIDIA driver found (libcuda.so.1 could not be loaded)";
  }
  return cudaGetErrorString(error);
}

const char* status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kSuccess:
      return "success";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kMisaligned:
      return "misaligned";
    case StatusCode::kUnsupportedDtype:
      return "unsupported dtype";
    case StatusCode::kWorkspaceTooSmall:
      return "workspace too small";
    case StatusCode::kNotSupported:
      return "not supported";
    case StatusCode::kCudaError:
      return "CUDA error";
    case StatusCode::kCompileError:
      return "compile error";
    case StatusCode::kFileError:
      return "file error";
    case StatusCode::kOutOfMemory:
      return "out of memory";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  if (ok()) return "success";
  std::string text = status_code_name(code_);
  if (!message_.empty()) text += ": " + message_;
  return text;
}

}  // namespace cudaops
