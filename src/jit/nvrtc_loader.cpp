#include "jit/nvrtc_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace cudaops::jit::detail {

namespace {

std::string module_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_nvrtc), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

constexpr const char* kName = "libnvrtc.so.13";

// Where NVRTC is looked for, in order. Every entry but the last is a path, checked by
// locate_nvrtc() without loading anything; the last is the bare name, for the dynamic loader's
// own search (its cache and system directories).
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* explicit_path = std::getenv("CUDAOPS_NVRTC_LIBRARY")) {
    if (*explicit_path != '\0') out.emplace_back(explicit_path);
  }
  std::vector<std::string> dirs;
  if (const char* paths = std::getenv("LD_LIBRARY_PATH")) {
    std::string list = paths;
    size_t begin = 0;
    while (begin <= list.size()) {
      const size_t end = std::min(list.find(':', begin), list.size());
      if (end > begin) dirs.push_back(list.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"}) {
    if (const char* root = std::getenv(variable)) {
      if (*root != '\0') {
        dirs.push_back(std::string(root) + "/lib64");
        dirs.push_back(std::string(root) + "/lib");
      }
    }
  }
  dirs.emplace_back("/usr/local/cuda/lib64");
  dirs.emplace_back("/usr/local/cuda-13/lib64");
#if defined(__aarch64__)
  dirs.emplace_back("/usr/local/cuda/targets/sbsa-linux/lib");
#else
  dirs.emplace_back("/usr/local/cuda/targets/x86_64-linux/lib");
#endif
  // An nvidia-cuda-nvrtc wheel next to the package that holds this code (site-packages).
  const std::string here = module_directory();
  if (!here.empty()) {
    dirs.push_back(here + "/../nvidia/cu13/lib");
    dirs.push_back(here + "/../nvidia/cuda_nvrtc/lib");
  }
  for (const std::string& dir : dirs)
    out.push_back(dir + "/" + kName);
  out.emplace_back(kName);
  return out;
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

// "13.0.88" from ".../libnvrtc.so.13.0.88", else "".
std::string version_in_name(const std::string& path) {
  const std::string real = real_path(path);
  const size_t slash = real.rfind('/');
  const std::string name = slash == std::string::npos ? real : real.substr(slash + 1);
  const std::string prefix = "libnvrtc.so.";
  if (name.compare(0, prefix.size(), prefix) != 0) return "";
  const std::string version = name.substr(prefix.size());
  int dots = 0;
  for (char c : version) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return "";
    }
  }
  return dots == 2 && version.back() != '.' ? version : "";
}

}  // namespace

std::string nvrtc_identity(const std::string& path, const std::string& loaded_version) {
  const std::string version = version_in_name(path);
  return version.empty() ? loaded_version + " " + real_path(path) : version;
}

NvrtcLocation locate_nvrtc() {
  NvrtcLocation location;
  for (const std::string& candidate : candidates()) {
    if (candidate.find('/') == std::string::npos) break;  // the loader's search: load to know
    if (access(candidate.c_str(), R_OK) != 0) continue;
    location.path = candidate;
    location.identity = version_in_name(candidate);
    return location;
  }
  return location;
}

namespace {

template <typename F>
bool bind(void* handle, const char* name, F* slot) {
  *slot = reinterpret_cast<F>(dlsym(handle, name));
  return *slot != nullptr;
}

std::mutex mutex;
Nvrtc* loaded = nullptr;

}  // namespace

Status load_nvrtc(const Nvrtc** out) {
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded != nullptr) {
    *out = loaded;
    return Status();
  }
  std::string tried;
  for (const std::string& candidate : candidates()) {
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      tried += "\n  " + candidate + ": " + (error ? error : "not loadable");
      continue;
    }
    auto nvrtc = std::make_unique<Nvrtc>();
    bool ok = bind(handle, "nvrtcVersion", &nvrtc->version) &&
              bind(handle, "nvrtcGetErrorString", &nvrtc->error_string) &&
              bind(handle, "nvrtcGetNumSupportedArchs", &nvrtc->num_supported_archs) &&
              bind(handle, "nvrtcGetSupportedArchs", &nvrtc->supported_archs) &&
              bind(handle, "nvrtcCreateProgram", &nvrtc->create_program) &&
              bind(handle, "nvrtcDestroyProgram", &nvrtc->destroy_program) &&
              bind(handle, "nvrtcCompileProgram", &nvrtc->compile_program) &&
              bind(handle, "nvrtcGetProgramLogSize", &nvrtc->program_log_size) &&
              bind(handle, "nvrtcGetProgramLog", &nvrtc->program_log) &&
              bind(handle, "nvrtcGetPTXSize", &nvrtc->ptx_size) &&
              bind(handle, "nvrtcGetPTX", &nvrtc->ptx) &&
              bind(handle, "nvrtcGetCUBINSize", &nvrtc->cubin_size) &&
              bind(handle, "nvrtcGetCUBIN", &nvrtc->cubin) &&
              bind(handle, "nvrtcAddNameExpression", &nvrtc->add_name_expression) &&
              bind(handle, "nvrtcGetLoweredName", &nvrtc->lowered_name);
    int major = 0, minor = 0, count = 0;
    ok = ok && nvrtc->version(&major, &minor) == NVRTC_SUCCESS &&
         nvrtc->num_supported_archs(&count) == NVRTC_SUCCESS && count > 0;
    if (ok) {
      nvrtc->archs.resize(static_cast<size_t>(count));
      ok = nvrtc->supported_archs(nvrtc->archs.data()) == NVRTC_SUCCESS;
    }
    if (!ok) {
      tried += "\n  " + candidate + ": not a usable NVRTC (a symbol or a query failed)";
      dlclose(handle);
      continue;
    }
    char path[4096] = {};
    if (dlinfo(handle, RTLD_DI_ORIGIN, path) == 0) {
      const size_t slash = candidate.rfind('/');
      nvrtc->path = std::string(path) + "/" +
                    (slash == std::string::npos ? candidate : candidate.substr(slash + 1));
    } else {
      nvrtc->path = candidate;
    }
    nvrtc->version_text = std::to_string(major) + "." + std::to_string(minor);
    nvrtc->identity = nvrtc_identity(nvrtc->path, nvrtc->version_text);
    nvrtc->major = major;
    nvrtc->minor = minor;
    loaded = nvrtc.release();  // kept for the life of the process, as the library stays loaded
    *out = loaded;
    return Status();
  }
  return Status(StatusCode::kNotSupported,
                "jit: NVRTC (libnvrtc.so.13) is not available. Install the CUDA toolkit 13 or "
                "`pip install nvidia-cuda-nvrtc`, or set CUDAOPS_NVRTC_LIBRARY to the library's "
                "path. Tried:" +
                    tried);
}

}  // namespace cudaops::jit::detail
