// The JIT's option list: parsed, checked and put in one canonical spelling, which is what NVRTC
// receives and what the cache key hashes.
#pragma once

#include <string>
#include <vector>

#include "cudaops/status.h"

namespace cudaops::jit::detail {

struct ParsedOptions {
  std::vector<std::string> nvrtc;         ///< canonical options, in the caller's order
  std::vector<std::string> include_dirs;  ///< absolute, in search order
  std::vector<std::string> pre_includes;  ///< -include headers, in order
  std::string arch;                       ///< "sm_90", "compute_90", "sm_90a"; empty: the device's
  bool has_std = false;                   ///< a -std option was given
};

/// Parses `options` (see CompileRequest::options). Relative include directories are made
/// absolute against the current directory. Errors name the option by its index.
Status parse_options(const std::vector<std::string>& options, ParsedOptions* out);

/// True for "sm_90", "sm_90a", "sm_100f", "compute_90", ...
bool valid_arch(const std::string& arch);

}  // namespace cudaops::jit::detail
