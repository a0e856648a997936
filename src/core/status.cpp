#include "cudaops/status.h"

namespace cudaops {

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
