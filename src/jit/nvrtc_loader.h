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

  std::string path;              ///< the file loaded
  std::string version_text;      ///< "13.0"
  int major = 0, minor = 0;
  std::vector<int> archs;        ///< supported SASS architectures (75, 80, ...)
};

/// The process's NVRTC, loaded on the first call. Fails with kNotSupported, listing every place
/// tried, when no usable libnvrtc is found (later calls try again).
Status load_nvrtc(const Nvrtc** out);

}  // namespace cudaops::jit::detail
