#pragma once

// The state behind a cudaops::jit::Kernel, shared by compile (jit_compile.cpp) and the Kernel's
// loading and launch (jit_kernel.cpp).
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cudaops/jit.h"

namespace cudaops::jit {

namespace detail {

/// One compiled kernel: what NVRTC made, and its loaded form per device.
struct Module {
  CompileInfo info;
  Resources resources;
  std::string ptx;
  std::vector<char> cubin;

  struct PerDevice {
    cudaFuncAttributes attributes{};
    std::vector<Parameter> parameters;
    size_t dynamic_shared_limit = 0;  // what the kernel is opted in to
    int optin_shared = 0;             // the device's opt-in maximum per block
    int max_grid[3] = {0, 0, 0};
  };
  std::mutex mutex;
  std::string op;  // "jit: <lowered name>", for messages; set when first loaded
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  std::map<int, PerDevice> devices;

  Status device_state(int device, PerDevice** out);
};

}  // namespace detail

}  // namespace cudaops::jit
