// NVRTC, loaded with dlopen when the JIT first needs it, so that libcudaops neither links it nor
// needs it for any other op.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

#include "cudaops/status.h"

namespace cudaops::jit::detail {

struct Nvrtc {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) num_supported_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) supported_archs = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) program_log = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcAddNameExpression) add_name_expression = nullptr;
  decltype(&::nvrtcGetLoweredName) lowered_name = nullptr;

  std::string path;          ///< the file loaded
  std::string identity;      ///< see nvrtc_identity()
  std::string version_text;  ///< "13.0"
  int major = 0, minor = 0;
  std::vector<int> archs;  ///< supported SASS architectures (75, 80, ...)
};

/// Where NVRTC would be loaded from, found without loading it (file lookups only), and what
/// identifies it in cache keys: "13.0.88" when the file's real name carries the full version
/// (libnvrtc.so.13.0.88, as the toolkit installs it), so that a cache hit needs no NVRTC at all;
/// else empty (the library must be loaded to know its version).
struct NvrtcLocation {
  std::string path;
  std::string identity;
};
NvrtcLocation locate_nvrtc();

/// The identity of the NVRTC library at `path`: the version in its real file name, or (when it
/// has none) "<nvrtcVersion> <real path>" from `loaded_version`.
std::string nvrtc_identity(const std::string& path, const std::string& loaded_version);

/// The process's NVRTC, loaded on the first call. Fails with kNotSupported, listing every place
/// tried, when no usable libnvrtc is found (later calls try again).
Status load_nvrtc(const Nvrtc** out);

}  // namespace cudaops::jit::detail
