// cudaops::jit compile: the key, the in-process and disk caches, and NVRTC.
#include <cuda_runtime_api.h>
#include <pwd.h>
#include <unistd.h>

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "cudaops/jit.h"
#include "cudaops/version.h"
#include "jit/disk_cache.h"
#include "jit/include_scan.h"
#include "jit/jit_module.h"
#include "jit/nvrtc_loader.h"
#include "jit/options.h"
#include "jit/sha256.h"

namespace cudaops::jit {

using detail::Module;

namespace {

using detail::DiskCache;
using detail::Nvrtc;
using detail::ParsedOptions;
using detail::PayloadReader;
using detail::PayloadWriter;
using detail::Sha256;

double since_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// ---- settings ----------------------------------------------------------------------------

std::string default_directory() {
  if (const char* dir = std::getenv("CUDAOPS_CACHE_DIR")) {
    if (*dir != '\0') return dir;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME")) {
    if (*xdg == '/') return std::string(xdg) + "/cudaops";
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home != '/') {
    const passwd* entry = getpwuid(getuid());
    home = entry != nullptr ? entry->pw_dir : nullptr;
  }
  return home != nullptr && *home == '/' ? std::string(home) + "/.cache/cudaops" : "";
}

// The settings and, when the environment held a value that cannot be used, what it was: the
// disk cache is then off, and each compilation says why.
struct Settings {
  CacheConfig config;
  std::string problem;
};

Settings environment_settings() {
  Settings settings;
  CacheConfig& config = settings.config;
  if (const char* enabled = std::getenv("CUDAOPS_JIT_CACHE")) {
    const std::string value = enabled;
    config.disk_enabled = !(value == "0" || value == "off" || value == "OFF" || value == "false");
  }
  if (const char* max_bytes = std::getenv("CUDAOPS_JIT_CACHE_MAX_BYTES")) {
    // Digits only: strtoull would take "-5" as 2^64 - 5.
    const std::string text = max_bytes;
    const bool digits = !text.empty() && text.size() <= 19 &&
                        text.find_first_not_of("0123456789") == std::string::npos;
    const unsigned long long value = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
    if (value > 0) {
      config.max_bytes = value;
    } else if (config.disk_enabled) {
      config.disk_enabled = false;
      settings.problem = "CUDAOPS_JIT_CACHE_MAX_BYTES=\"" + text.substr(0, 40) +
                         "\" is not a positive number of bytes, so the disk cache is off";
    }
  }
  config.directory = default_directory();
  return settings;
}

std::mutex config_mutex;

Settings& settings_slot() {
  static Settings settings = environment_settings();
  return settings;
}

// ---- the in-process cache ----------------------------------------------------------------

std::mutex memory_mutex;

// Never destroyed: kernels loaded into CUDA must not be unloaded after the runtime is gone.
std::unordered_map<std::string, std::shared_ptr<Module>>& memory_cache() {
  static auto* cache = new std::unordered_map<std::string, std::shared_ptr<Module>>();
  return *cache;
}

// ---- entries -----------------------------------------------------------------------------

std::string serialize(const Module& module) {
  PayloadWriter out;
  out.bytes(module.info.lowered_name);
  out.bytes(module.info.arch);
  out.bytes(module.info.nvrtc_version);
  out.bytes(module.info.log);
  out.bytes(module.ptx);
  out.bytes(std::string(module.cubin.begin(), module.cubin.end()));
  out.f64(module.info.nvrtc_ms);
  const Resources& r = module.resources;
  for (int64_t value : {int64_t{r.registers}, int64_t{r.barriers}, r.stack_frame_bytes,
                        r.spill_store_bytes, r.spill_load_bytes, r.static_shared_bytes}) {
    out.u64(static_cast<uint64_t>(value));
  }
  return out.take();
}

bool deserialize(const std::string& payload, Module* module) {
  PayloadReader in(payload);
  std::string cubin;
  bool ok = in.bytes(&module->info.lowered_name) && in.bytes(&module->info.arch) &&
            in.bytes(&module->info.nvrtc_version) && in.bytes(&module->info.log) &&
            in.bytes(&module->ptx) && in.bytes(&cubin) && in.f64(&module->info.nvrtc_ms);
  uint64_t values[6] = {};
  for (uint64_t& value : values)
    ok = ok && in.u64(&value);
  if (!ok || !in.at_end() || module->info.lowered_name.empty()) return false;
  module->cubin.assign(cubin.begin(), cubin.end());
  Resources& r = module->resources;
  r.registers = static_cast<int>(static_cast<int64_t>(values[0]));
  r.barriers = static_cast<int>(static_cast<int64_t>(values[1]));
  r.stack_frame_bytes = static_cast<int64_t>(values[2]);
  r.spill_store_bytes = static_cast<int64_t>(values[3]);
  r.spill_load_bytes = static_cast<int64_t>(values[4]);
  r.static_shared_bytes = static_cast<int64_t>(values[5]);
  return true;
}

// ---- the ptxas report --------------------------------------------------------------------

int64_t number_before(const std::string& text, const char* suffix, int64_t fallback) {
  const size_t at = text.find(suffix);
  if (at == std::string::npos || at == 0) return fallback;
  size_t begin = at;
  while (begin > 0 && text[begin - 1] == ' ')
    --begin;
  size_t digits = begin;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(text[digits - 1])))
    --digits;
  if (digits == begin) return fallback;
  return std::strtoll(text.c_str() + digits, nullptr, 10);
}

// Reads "Compiling entry function '<name>'" and the lines after it, up to the next function.
bool parse_resources(const std::string& log, const std::string& name, Resources* out) {
  const std::string marker = "Compiling entry function '" + name + "'";
  const size_t begin = log.find(marker);
  if (begin == std::string::npos) return false;
  size_t end = log.find("Compiling entry function '", begin + marker.size());
  if (end == std::string::npos) end = log.size();
  const std::string block = log.substr(begin, end - begin);
  Resources r;
  r.stack_frame_bytes = number_before(block, " bytes stack frame", 0);
  r.spill_store_bytes = number_before(block, " bytes spill stores", 0);
  r.spill_load_bytes = number_before(block, " bytes spill loads", 0);
  r.registers = static_cast<int>(number_before(block, " registers", -1));
  r.barriers = static_cast<int>(number_before(block, " barriers", 0));
  r.static_shared_bytes = number_before(block, " bytes smem", 0);
  *out = r;
  return true;
}

// ---- the target --------------------------------------------------------------------------

Status device_cc(int* cc) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  int major = 0, minor = 0;
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::kCudaError,
                  std::string("jit: no CUDA device to compile for (") + cudaGetErrorName(error) +
                      ": " + cudaGetErrorString(error) +
                      "); give -arch=sm_XY to compile without one",
                  static_cast<int>(error));
  }
  *cc = major * 10 + minor;
  return Status();
}

// The target for a device of compute capability `cc` with this NVRTC: its SASS, or the newest
// PTX NVRTC has when the GPU is newer than NVRTC (compiled by the driver when loaded).
Status arch_for(const Nvrtc& nvrtc, int cc, std::string* arch) {
  for (int supported : nvrtc.archs) {
    if (supported == cc) {
      *arch = "sm_" + std::to_string(cc);
      return Status();
    }
  }
  const int newest = nvrtc.archs.back();
  if (cc > newest) {
    *arch = "compute_" + std::to_string(newest);
    return Status();
  }
  return Status(StatusCode::kNotSupported, "jit: NVRTC " + nvrtc.version_text +
                                               " cannot compile for this GPU (sm_" +
                                               std::to_string(cc) + ")");
}

struct Prepared {
  const Nvrtc* nvrtc = nullptr;  // null while a cache hit may still make it unnecessary
  std::string nvrtc_identity;
  bool remember_identity = false;  // NVRTC's file name carries no version: note it once loaded
  int device_cc = 0;               // the device's, when the target is the device's
  ParsedOptions options;
  std::string arch;
  std::string source_dir;
  detail::Dependencies dependencies;
  Sha256::Digest key{};
};

Status check_request(const CompileRequest& request) {
  if (request.source.empty()) {
    return Status(StatusCode::kInvalidArgument, "jit: source must not be empty");
  }
  if (request.source.find('\0') != std::string::npos) {
    return Status(StatusCode::kInvalidArgument, "jit: source must not contain a NUL character");
  }
  if (request.kernel.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: kernel must name a __global__ function (or a name expression such as "
                  "\"scale<float>\")");
  }
  if (request.file_name.empty() || request.file_name.find('\0') != std::string::npos) {
    return Status(StatusCode::kInvalidArgument, "jit: file_name must be a non-empty file name");
  }
  return Status();
}

Sha256::Digest key_of(const CompileRequest& request, const Prepared& prepared) {
  Sha256 hash;
  hash.field("cudaops-jit-key-1");
  hash.field(version_string());
  hash.field(prepared.nvrtc_identity);
  hash.field(prepared.arch);
  hash.field(request.file_name);  // diagnostics and __FILE__; the directory is in the scan
  hash.field(request.source);
  hash.field(request.kernel);
  hash.field(static_cast<uint64_t>(prepared.options.nvrtc.size()));
  for (const std::string& option : prepared.options.nvrtc)
    hash.field(option);
  hash.update(prepared.dependencies.digest.data(), prepared.dependencies.digest.size());
  return hash.finish();
}

detail::Dependencies scan(const CompileRequest& request, const Prepared& prepared) {
  return detail::scan_dependencies(request.source, prepared.source_dir,
                                   prepared.options.include_dirs, prepared.options.pre_includes);
}

// NVRTC's version for a library file whose name does not carry it, remembered in the cache
// directory by the file's identity (real path, size, inode, modification and change times): a
// file replaced or rewritten in place gets a new identity, and is loaded once to learn it.
std::string nvrtc_stat_line(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return "";
  struct stat info {};
  if (stat(resolved, &info) != 0) return "";
  return std::string(resolved) + "|" + std::to_string(info.st_size) + "|" +
         std::to_string(info.st_ino) + "|" + std::to_string(info.st_mtim.tv_sec) + "." +
         std::to_string(info.st_mtim.tv_nsec) + "|" + std::to_string(info.st_ctim.tv_sec) + "." +
         std::to_string(info.st_ctim.tv_nsec);
}

// The note of `line` is kept, checked and verified as the kernels' entries are.
Sha256::Digest nvrtc_note_key(const std::string& line) {
  Sha256 hash;
  hash.field("cudaops nvrtc identity note");
  hash.field(line);
  return hash.finish();
}

std::unique_ptr<DiskCache> note_cache() {
  std::lock_guard<std::mutex> lock(config_mutex);
  const CacheConfig& config = settings_slot().config;
  if (!config.disk_enabled || config.directory.empty()) return nullptr;
  return std::make_unique<DiskCache>(config.directory + "/" + kCacheSubdirectory, config.max_bytes,
                                     ".note");
}

std::string remembered_nvrtc_identity(const std::string& path) {
  const std::unique_ptr<DiskCache> disk = note_cache();
  const std::string line = nvrtc_stat_line(path);
  if (disk == nullptr || line.empty()) return "";
  std::string payload, why;
  if (disk->load(nvrtc_note_key(line), &payload, &why) != DiskCache::Lookup::kHit) return "";
  PayloadReader in(payload);
  std::string stored, identity;
  if (!in.bytes(&stored) || stored != line || !in.bytes(&identity) || !in.at_end()) return "";
  return identity;
}

void remember_nvrtc_identity(const std::string& path, const std::string& identity) {
  const std::unique_ptr<DiskCache> disk = note_cache();
  const std::string line = nvrtc_stat_line(path);
  if (disk == nullptr || line.empty()) return;
  PayloadWriter out;
  out.bytes(line);
  out.bytes(identity);
  (void)disk->store(nvrtc_note_key(line), out.take());  // a note not kept costs a load later
}

// Loads NVRTC if `out` has none yet, and settles what depends on it (identity, target, key).
Status load(const CompileRequest& request, Prepared* out) {
  if (out->nvrtc != nullptr) return Status();
  Status status = detail::load_nvrtc(&out->nvrtc);
  if (!status.ok()) return status;
  out->nvrtc_identity = out->nvrtc->identity;
  if (out->remember_identity &&
      remembered_nvrtc_identity(out->nvrtc->path) != out->nvrtc_identity) {
    remember_nvrtc_identity(out->nvrtc->path, out->nvrtc_identity);
  }
  if (out->options.arch.empty()) {
    status = arch_for(*out->nvrtc, out->device_cc, &out->arch);
    if (!status.ok()) return status;
  }
  out->key = key_of(request, *out);
  return Status();
}

// Checks and parses the request, and computes its key. With `may_defer_nvrtc`, NVRTC is not
// loaded when the file it would be loaded from names its version: a disk-cache hit then costs
// no NVRTC load (milliseconds). The target of a device is then taken to be its SASS; load()
// corrects it (and the key) if this NVRTC cannot produce that.
Status prepare(const CompileRequest& request, Prepared* out, bool may_defer_nvrtc) {
  Status status = check_request(request);
  if (!status.ok()) return status;
  status = detail::parse_options(request.options, &out->options);
  if (!status.ok()) return status;
  if (out->options.arch.empty()) {
    status = device_cc(&out->device_cc);
    if (!status.ok()) return status;
  } else {
    out->arch = out->options.arch;
  }
  std::error_code error;
  const std::filesystem::path file = std::filesystem::absolute(request.file_name, error);
  out->source_dir = error ? "." : file.parent_path().lexically_normal().string();
  out->dependencies = scan(request, *out);
  detail::NvrtcLocation location =
      may_defer_nvrtc ? detail::locate_nvrtc() : detail::NvrtcLocation{};
  if (location.identity.empty() && !location.path.empty()) {
    out->remember_identity = true;
    location.identity = remembered_nvrtc_identity(location.path);
  }
  if (location.identity.empty()) return load(request, out);
  out->nvrtc_identity = location.identity;
  if (out->options.arch.empty()) out->arch = "sm_" + std::to_string(out->device_cc);
  out->key = key_of(request, *out);
  return Status();
}

// Runs NVRTC. On success fills module's code, log, lowered name and resources.
Status run_nvrtc(const CompileRequest& request, const Prepared& prepared, Module* module) {
  const Nvrtc& nvrtc = *prepared.nvrtc;
  nvrtcProgram program = nullptr;
  nvrtcResult result = nvrtc.create_program(&program, request.source.c_str(),
                                            request.file_name.c_str(), 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS) {
    return Status(StatusCode::kCompileError,
                  std::string("jit: nvrtcCreateProgram failed: ") + nvrtc.error_string(result));
  }
  struct Destroy {
    const Nvrtc& nvrtc;
    nvrtcProgram* program;
    ~Destroy() { nvrtc.destroy_program(program); }
  } destroy{nvrtc, &program};

  result = nvrtc.add_name_expression(program, request.kernel.c_str());
  if (result != NVRTC_SUCCESS) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: kernel '" + request.kernel +
                      "' is not a usable name expression: " + nvrtc.error_string(result));
  }
  const bool sass = prepared.arch.compare(0, 3, "sm_") == 0;
  std::vector<std::string> options = prepared.options.nvrtc;
  options.push_back("--gpu-architecture=" + prepared.arch);
  if (sass) options.emplace_back("--ptxas-options=-v");
  // NVRTC 12.9 and newer keep a cache of their own, whose hits give no ptxas report; this
  // library's cache is keyed more strictly, so NVRTC's is switched off.
  if (nvrtc.major > 12 || (nvrtc.major == 12 && nvrtc.minor >= 9)) {
    options.emplace_back("--no-cache");
  }
  std::vector<const char*> pointers;
  pointers.reserve(options.size());
  for (const std::string& option : options)
    pointers.push_back(option.c_str());

  const auto start = std::chrono::steady_clock::now();
  result = nvrtc.compile_program(program, static_cast<int>(pointers.size()), pointers.data());
  module->info.nvrtc_ms = since_ms(start);
  size_t log_size = 0;
  if (nvrtc.program_log_size(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    module->info.log.resize(log_size);
    if (nvrtc.program_log(program, &module->info.log[0]) != NVRTC_SUCCESS) module->info.log.clear();
    while (!module->info.log.empty() && module->info.log.back() == '\0') {
      module->info.log.pop_back();
    }
  }
  if (result == NVRTC_ERROR_INVALID_OPTION) {
    std::string text = "jit: NVRTC refused the options:";
    for (const std::string& option : options)
      text += " " + option;
    if (!module->info.log.empty()) text += "\n" + module->info.log;
    return Status(StatusCode::kInvalidArgument, text);
  }
  if (result != NVRTC_SUCCESS && module->info.log.find("__nv_name_map") != std::string::npos) {
    // The error is in the name expression NVRTC made of `kernel`, not in the source.
    return Status(StatusCode::kInvalidArgument,
                  "jit: kernel '" + request.kernel + "' is not a __global__ function of " +
                      request.file_name + " (NVRTC: " + module->info.log + ")");
  }
  if (result != NVRTC_SUCCESS) {
    return Status(StatusCode::kCompileError,
                  "jit: compiling '" + request.kernel + "' of " + request.file_name + " failed (" +
                      nvrtc.error_string(result) + "):\n" + module->info.log);
  }
  const char* lowered = nullptr;
  result = nvrtc.lowered_name(program, request.kernel.c_str(), &lowered);
  if (result != NVRTC_SUCCESS || lowered == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: kernel '" + request.kernel + "' was not found in " + request.file_name);
  }
  module->info.lowered_name = lowered;

  size_t ptx_size = 0;
  if (nvrtc.ptx_size(program, &ptx_size) == NVRTC_SUCCESS && ptx_size > 0) {
    module->ptx.resize(ptx_size);
    if (nvrtc.ptx(program, &module->ptx[0]) != NVRTC_SUCCESS) module->ptx.clear();
    while (!module->ptx.empty() && module->ptx.back() == '\0')
      module->ptx.pop_back();
  }
  if (sass) {
    size_t cubin_size = 0;
    result = nvrtc.cubin_size(program, &cubin_size);
    if (result == NVRTC_SUCCESS && cubin_size > 0) {
      module->cubin.resize(cubin_size);
      result = nvrtc.cubin(program, module->cubin.data());
    }
    if (result != NVRTC_SUCCESS || module->cubin.empty()) {
      return Status(StatusCode::kCompileError, "jit: NVRTC produced no cubin for " + prepared.arch);
    }
    // Without a ptxas report for it the resources stay unknown (-1).
    (void)parse_resources(module->info.log, module->info.lowered_name, &module->resources);
  }
  if (module->ptx.find(".entry " + module->info.lowered_name + "(") == std::string::npos) {
    return Status(
        StatusCode::kInvalidArgument,
        "jit: '" + request.kernel + "' is not a __global__ function of " + request.file_name);
  }
  module->info.arch = prepared.arch;
  module->info.nvrtc_version = nvrtc.version_text;
  return Status();
}

}  // namespace

// ---- compile -----------------------------------------------------------------------------

const char* cache_source_name(CacheSource source) noexcept {
  switch (source) {
    case CacheSource::kCompiled:
      return "compiled";
    case CacheSource::kMemoryCache:
      return "memory cache";
    case CacheSource::kDiskCache:
      return "disk cache";
  }
  return "unknown";
}

Status cache_key(const CompileRequest& request, std::string* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "jit: out must not be null");
  Prepared prepared;
  Status status = prepare(request, &prepared, false);
  if (status.ok()) *out = Sha256::hex(prepared.key);
  return status;
}

Status compile(const CompileRequest& request, Kernel* out) {
  const auto start = std::chrono::steady_clock::now();
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "jit: out must not be null");
  Prepared prepared;
  Status status = prepare(request, &prepared, true);
  if (!status.ok()) return status;
  std::string key = Sha256::hex(prepared.key);

  bool replaced_corrupt = false;
  std::string not_stored, not_loaded;
  // The module is shared and never changes once cached; the facts of this call go in a copy.
  auto finish = [&](const std::shared_ptr<Module>& module, CacheSource source) {
    auto info = std::make_shared<CompileInfo>(module->info);
    info->source = source;
    info->total_ms = since_ms(start);
    info->replaced_corrupt_entry = replaced_corrupt;
    info->not_stored_reason = source == CacheSource::kCompiled ? not_stored : "";
    info->not_loaded_reason = source == CacheSource::kCompiled ? not_loaded : "";
    info->headers_hashed = static_cast<int64_t>(prepared.dependencies.headers.size());
    out->module_ = module;
    out->info_ = std::move(info);
    return Status();
  };

  CacheConfig config;
  std::string environment_problem;
  {
    std::lock_guard<std::mutex> lock(config_mutex);
    config = settings_slot().config;
    environment_problem = settings_slot().problem;
  }
  const bool use_disk =
      config.disk_enabled && !config.directory.empty() && prepared.dependencies.complete;
  if (!environment_problem.empty()) {
    not_stored = environment_problem;
  } else if (!config.disk_enabled) {
    not_stored = "the disk cache is disabled";
  } else if (config.directory.empty()) {
    not_stored = "no cache directory (set CUDAOPS_CACHE_DIR or HOME)";
  } else if (!prepared.dependencies.complete) {
    not_stored = prepared.dependencies.incomplete_reason;
  }
  const DiskCache disk(config.directory + "/" + kCacheSubdirectory, config.max_bytes);

  // The in-process cache, then the disk; true when the kernel was found.
  auto lookup = [&]() {
    {
      std::lock_guard<std::mutex> lock(memory_mutex);
      auto found = memory_cache().find(key);
      if (found != memory_cache().end()) {
        (void)finish(found->second, CacheSource::kMemoryCache);
        return true;
      }
    }
    if (!use_disk) return false;
    auto module = std::make_shared<Module>();
    module->info.key = key;
    std::string payload, why;
    const DiskCache::Lookup result = disk.load(prepared.key, &payload, &why);
    if (result == DiskCache::Lookup::kHit && deserialize(payload, module.get())) {
      std::shared_ptr<Module> shared;
      {
        std::lock_guard<std::mutex> lock(memory_mutex);
        shared = memory_cache().emplace(key, module).first->second;
      }
      (void)finish(shared, CacheSource::kDiskCache);
      return true;
    }
    replaced_corrupt = replaced_corrupt || result == DiskCache::Lookup::kCorrupt;
    if (result == DiskCache::Lookup::kCorrupt || result == DiskCache::Lookup::kUntrusted) {
      not_loaded = why;
    }
    return false;
  };
  if (lookup()) return Status();
  if (prepared.nvrtc == nullptr) {
    // A miss: NVRTC is needed now; the key changes only if the target must change with it.
    status = load(request, &prepared);
    if (!status.ok()) return status;
    const std::string loaded_key = Sha256::hex(prepared.key);
    if (loaded_key != key) {
      key = loaded_key;
      if (lookup()) return Status();
    }
  }

  auto module = std::make_shared<Module>();
  module->info.key = key;
  status = run_nvrtc(request, prepared, module.get());
  if (!status.ok()) return status;
  if (use_disk) {
    // A header changed while NVRTC read it: the result matches neither key, so it is not kept.
    const detail::Dependencies after = scan(request, prepared);
    if (after.digest != prepared.dependencies.digest) {
      not_stored = "a header changed during the compilation";
    } else {
      const Status stored = disk.store(prepared.key, serialize(*module));
      if (!stored.ok()) not_stored = stored.message();
    }
  }
  {
    std::lock_guard<std::mutex> lock(memory_mutex);
    memory_cache()[key] = module;
  }
  return finish(module, CacheSource::kCompiled);
}

CacheConfig cache_config() {
  std::lock_guard<std::mutex> lock(config_mutex);
  return settings_slot().config;
}

Status set_cache_config(const CacheConfig& config) {
  CacheConfig next = config;
  if (next.directory.empty()) next.directory = default_directory();
  if (next.max_bytes == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: max_bytes must be > 0 (set disk_enabled = false to disable the cache)");
  }
  std::lock_guard<std::mutex> lock(config_mutex);
  settings_slot() = Settings{next, ""};
  return Status();
}

Status clear_cache(bool memory, bool disk) {
  if (memory) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    memory_cache().clear();
  }
  const CacheConfig config = cache_config();
  if (!disk || config.directory.empty()) return Status();
  return DiskCache(config.directory + "/" + kCacheSubdirectory, config.max_bytes).clear();
}

Status nvrtc_description(std::string* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "jit: out must not be null");
  const Nvrtc* nvrtc = nullptr;
  Status status = detail::load_nvrtc(&nvrtc);
  if (status.ok()) *out = nvrtc->version_text + " (" + nvrtc->path + ")";
  return status;
}

}  // namespace cudaops::jit
