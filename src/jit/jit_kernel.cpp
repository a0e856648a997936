// cudaops::jit::Kernel: its module loaded per device, the checks of a launch against the
// kernel's parameters and limits, and the launch.
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <string>

#include "core/launch.h"
#include "cudaops/jit.h"
#include "jit/jit_module.h"

namespace cudaops::jit {

using detail::Module;

namespace {

constexpr const char* kOp = "jit";

// The number of parameters of `.entry <name>(...)` in the PTX.
size_t ptx_parameter_count(const std::string& ptx, const std::string& name) {
  const std::string marker = ".entry " + name + "(";
  const size_t begin = ptx.find(marker);
  if (begin == std::string::npos) return 0;
  const size_t end = ptx.find(')', begin + marker.size());
  size_t count = 0;
  for (size_t at = ptx.find(".param", begin); at != std::string::npos && at < end;
       at = ptx.find(".param", at + 6)) {
    ++count;
  }
  return count;
}

Status not_valid(const char* what) {
  return Status(StatusCode::kInvalidArgument,
                std::string("jit: ") + what + " of an empty Kernel (compile() did not succeed)");
}

}  // namespace

// ---- Module ------------------------------------------------------------------------------

Status detail::Module::device_state(int device, PerDevice** out) {
  std::lock_guard<std::mutex> lock(mutex);
  auto found = devices.find(device);
  if (found != devices.end()) {
    *out = &found->second;
    return Status();
  }
  cudaError_t error = cudaSuccess;
  if (library == nullptr) {
    op = std::string(kOp) + ": " + info.lowered_name;
    const void* image = cubin.empty() ? static_cast<const void*>(ptx.c_str())
                                      : static_cast<const void*>(cubin.data());
    error = cudaLibraryLoadData(&library, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (error != cudaSuccess) {
      library = nullptr;
      (void)cudaGetLastError();
      return cudaops::detail::cuda_status(
          error, kOp, ("loading " + info.lowered_name + " (" + info.arch + ")").c_str());
    }
    error = cudaLibraryGetKernel(&kernel, library, info.lowered_name.c_str());
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return cudaops::detail::cuda_status(error, kOp, ("finding " + info.lowered_name).c_str());
    }
  }
  PerDevice state;
  const void* func = reinterpret_cast<const void*>(kernel);
  error = cudaFuncGetAttributes(&state.attributes, func);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string what =
        "loading " + info.lowered_name + " (" + info.arch + ") on device " + std::to_string(device);
    return cudaops::detail::cuda_status(error, kOp, what.c_str());
  }
  // The count from the PTX signature, so that no query is made past the last parameter.
  const size_t count = ptx_parameter_count(ptx, info.lowered_name);
  for (size_t index = 0; index < count; ++index) {
    Parameter parameter;
    error = cudaFuncGetParamInfo(func, index, &parameter.offset, &parameter.size);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return cudaops::detail::cuda_status(error, kOp, "querying the kernel's parameters");
    }
    state.parameters.push_back(parameter);
  }
  state.dynamic_shared_limit = static_cast<size_t>(state.attributes.maxDynamicSharedSizeBytes);
  error =
      cudaDeviceGetAttribute(&state.optin_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  for (int i = 0; i < 3 && error == cudaSuccess; ++i) {
    const cudaDeviceAttr attribute = i == 0   ? cudaDevAttrMaxGridDimX
                                     : i == 1 ? cudaDevAttrMaxGridDimY
                                              : cudaDevAttrMaxGridDimZ;
    error = cudaDeviceGetAttribute(&state.max_grid[i], attribute, device);
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaops::detail::cuda_status(error, kOp, "querying the device");
  }
  *out = &devices.emplace(device, std::move(state)).first->second;
  return Status();
}

// ---- Kernel ------------------------------------------------------------------------------

Kernel::Kernel() = default;
Kernel::~Kernel() = default;
Kernel::Kernel(const Kernel&) = default;
Kernel& Kernel::operator=(const Kernel&) = default;
Kernel::Kernel(Kernel&&) noexcept = default;
Kernel& Kernel::operator=(Kernel&&) noexcept = default;

const CompileInfo& Kernel::info() const {
  return *info_;
}
const Resources& Kernel::resources() const {
  return module_->resources;
}
const std::string& Kernel::ptx() const {
  return module_->ptx;
}
const std::vector<char>& Kernel::cubin() const {
  return module_->cubin;
}

namespace {

Status current_state(Module& module, Module::PerDevice** state) {
  int device = 0;
  const cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaops::detail::cuda_status(error, kOp, "no CUDA device");
  }
  return module.device_state(device, state);
}

}  // namespace

Status Kernel::max_threads_per_block(int* out) const {
  if (!valid()) return not_valid("max_threads_per_block");
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "jit: out must not be null");
  Module::PerDevice* state = nullptr;
  Status status = current_state(*module_, &state);
  if (status.ok()) *out = state->attributes.maxThreadsPerBlock;
  return status;
}

Status Kernel::parameters(std::vector<Parameter>* out) const {
  if (!valid()) return not_valid("parameters");
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "jit: out must not be null");
  Module::PerDevice* state = nullptr;
  Status status = current_state(*module_, &state);
  if (status.ok()) *out = state->parameters;
  return status;
}

Status Kernel::launch(Dim3 grid, Dim3 block, void* const* args, size_t num_args, size_t shared_mem,
                      cudaStream_t stream) const {
  if (!valid()) return not_valid("launch");
  // Messages are built only on failure: a successful launch allocates nothing.
  auto invalid = [&](const std::string& text) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(kOp) + ": " + module_->info.lowered_name + ": " + text);
  };
  const uint32_t grid_dims[3] = {grid.x, grid.y, grid.z};
  const uint32_t block_dims[3] = {block.x, block.y, block.z};
  for (int i = 0; i < 3; ++i) {
    if (grid_dims[i] == 0 || block_dims[i] == 0) {
      return invalid("grid and block dimensions must be >= 1, got grid (" + std::to_string(grid.x) +
                     ", " + std::to_string(grid.y) + ", " + std::to_string(grid.z) +
                     ") and block (" + std::to_string(block.x) + ", " + std::to_string(block.y) +
                     ", " + std::to_string(block.z) + ")");
    }
  }
  if (num_args > 0 && args == nullptr) return invalid("args must not be null with num_args > 0");
  Module::PerDevice* state = nullptr;
  Status status = current_state(*module_, &state);
  if (!status.ok()) return status;
  for (int i = 0; i < 3; ++i) {
    if (grid_dims[i] > static_cast<uint32_t>(state->max_grid[i])) {
      return invalid("grid dimension " + std::string(1, "xyz"[i]) + " is " +
                     std::to_string(grid_dims[i]) + ", above the device's limit of " +
                     std::to_string(state->max_grid[i]));
    }
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (block.z > 64 || block.x > 1024 || block.y > 1024 ||
      threads > static_cast<uint64_t>(state->attributes.maxThreadsPerBlock)) {
    return invalid(
        "a block of (" + std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
        std::to_string(block.z) + ") threads is more than the kernel's limit of " +
        std::to_string(state->attributes.maxThreadsPerBlock) + " threads per block (z at most 64)");
  }
  if (num_args != state->parameters.size()) {
    return invalid("the kernel takes " + std::to_string(state->parameters.size()) +
                   " arguments, got " + std::to_string(num_args));
  }
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i] == nullptr) return invalid("args[" + std::to_string(i) + "] must not be null");
  }
  const size_t static_shared = state->attributes.sharedSizeBytes;
  if (shared_mem + static_shared > static_cast<size_t>(state->optin_shared)) {
    return invalid("shared_mem of " + std::to_string(shared_mem) + " bytes (plus " +
                   std::to_string(static_shared) + " static) is more than the device's " +
                   std::to_string(state->optin_shared) + " bytes per block");
  }
  if (shared_mem > state->dynamic_shared_limit) {
    std::lock_guard<std::mutex> lock(module_->mutex);
    if (shared_mem > state->dynamic_shared_limit) {
      const cudaError_t error = cudaFuncSetAttribute(reinterpret_cast<const void*>(module_->kernel),
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     static_cast<int>(shared_mem));
      if (error != cudaSuccess) {
        (void)cudaGetLastError();
        return cudaops::detail::cuda_status(error, module_->op.c_str(),
                                            "opting in to dynamic shared memory");
      }
      state->dynamic_shared_limit = shared_mem;
    }
  }
  const cudaError_t error = cudaLaunchKernel(
      reinterpret_cast<const void*>(module_->kernel), dim3(grid.x, grid.y, grid.z),
      dim3(block.x, block.y, block.z), const_cast<void**>(args), shared_mem, stream);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaops::detail::cuda_status(error, module_->op.c_str(), "kernel launch failed");
  }
  return cudaops::detail::check_launch(module_->op.c_str(), stream);
}

}  // namespace cudaops::jit
