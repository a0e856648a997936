#pragma once

#include <string>
#include <utility>

#include "cudaops/export.h"

namespace cudaops {

/// Why a call failed.
enum class StatusCode : int {
  kSuccess = 0,
  kInvalidArgument = 1,    ///< a null pointer with work to do, a negative size, an impossible shape
  kMisaligned = 2,         ///< a pointer not aligned to its element size
  kUnsupportedDtype = 3,   ///< the op has no kernel for that dtype
  kWorkspaceTooSmall = 4,  ///< the caller's scratch buffer is smaller than the size query said
  kNotSupported = 5,       ///< valid, but not implemented by this build or device
  kCudaError = 6,          ///< the CUDA runtime reported an error (see cuda_error())
  kCompileError = 7,       ///< run-time compilation failed; the message holds the compiler's log
  kFileError = 8,    ///< a file could not be read or written, or is not what it must be (truncated,
                     ///< corrupted, of another version or byte order, not the user's own)
  kOutOfMemory = 9,  ///< host memory the call needs could not be allocated
};

/// Short lower-case name of a code, e.g. "invalid argument".
CUDAOPS_EXPORT const char* status_code_name(StatusCode code) noexcept;

/// What a CUDA runtime error code means, as the library's messages say it: the runtime's text,
/// but "no NVIDIA driver found (libcuda.so.1 could not be loaded)" where the runtime reports an
/// insufficient driver and there is no driver at all.
CUDAOPS_EXPORT const char* cuda_error_description(int cuda_error) noexcept;

/// The result of every public call. Success carries no message and allocates nothing; a failure
/// carries a message that names the function and the argument at fault.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string message, int cuda_error = 0)
      : code_(code), cuda_error_(cuda_error), message_(std::move(message)) {}

  bool ok() const noexcept { return code_ == StatusCode::kSuccess; }
  StatusCode code() const noexcept { return code_; }
  /// The cudaError_t value when code() is kCudaError, else 0.
  int cuda_error() const noexcept { return cuda_error_; }
  const std::string& message() const noexcept { return message_; }
  /// "<code name>: <message>", or "success".
  CUDAOPS_EXPORT std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kSuccess;
  int cuda_error_ = 0;
  std::string message_;
};

}  // namespace cudaops
