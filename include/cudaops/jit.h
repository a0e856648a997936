#pragma once

// Run-time compilation of CUDA C++ through NVRTC, with an in-process and an on-disk cache.
//
//   cudaops::jit::Kernel kernel;
//   cudaops::Status status = cudaops::jit::compile(
//       {source, "scale<float>", {"-DBLOCK=256", "-I/my/include"}}, &kernel);
//   void* args[] = {&x, &alpha, &n};
//   status = kernel.launch({blocks}, {256}, args, 3, /*shared_mem=*/0, stream);
//
// NVRTC (libnvrtc.so.13) is loaded when the first compilation needs it: from the library search
// path, $CUDAOPS_NVRTC_LIBRARY, the CUDA toolkit ($CUDA_HOME, /usr/local/cuda) or an installed
// nvidia-cuda-nvrtc wheel. Without it, compile() returns kNotSupported and nothing else changes.
//
// The cache key is a SHA-256 over the source, the kernel name, the options, the NVRTC version,
// the target architecture, the library version and the contents of every header the source can
// include through its include path (found by following its #include lines transitively, whether
// or not a branch around them is taken, so that a header read by the compiler is always in the
// key). Headers are read by content on every lookup; timestamps are never trusted. Disk entries
// are written to a temporary file and renamed into place, carry a SHA-256 of their contents, and
// are recompiled (never loaded) when they fail to verify.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"

namespace cudaops::jit {

/// What to compile.
struct CompileRequest {
  std::string source;  ///< CUDA C++ source text
  /// The kernel: an extern "C" name ("saxpy") or a name expression for a template or a kernel in
  /// a namespace ("scale<float>", "ns::kernel"), lowered by NVRTC to its mangled name.
  std::string kernel;
  /// NVRTC options, one per element: -DNAME[=VALUE], -UNAME, -I<dir> (relative directories are
  /// made absolute), -include <header>, -std=c++17 (the default) or c++20, -lineinfo, -G,
  /// --use_fast_math, -arch=sm_XY (default: the current device's architecture), -maxrregcount=N
  /// and NVRTC's other code-generation options. "-I dir" and "-D X" may also be given as two
  /// elements. Options that write files (-time, -create-pch, -pch, -use-pch) or produce no
  /// cubin (-dlto, -optix-ir) are refused.
  std::vector<std::string> options;
  /// The name diagnostics give the source: errors read "<file_name>(<line>): error: ...".
  std::string file_name = "source.cu";
};

/// Where compile() found the kernel.
enum class CacheSource {
  kCompiled,     ///< compiled by NVRTC in this call
  kMemoryCache,  ///< compiled earlier in this process
  kDiskCache,    ///< read from the disk cache and verified
};

/// "compiled", "memory cache" or "disk cache".
CUDAOPS_EXPORT const char* cache_source_name(CacheSource source) noexcept;

/// What the compiler reported for the kernel (ptxas), known without a GPU. Sizes in bytes, per
/// thread for the stack and spills. -1 when the target is PTX only (no ptxas report).
struct Resources {
  int registers = -1;
  int barriers = -1;
  int64_t stack_frame_bytes = -1;
  int64_t spill_store_bytes = -1;
  int64_t spill_load_bytes = -1;
  int64_t static_shared_bytes = -1;
};

/// How the kernel was obtained.
struct CompileInfo {
  CacheSource source = CacheSource::kCompiled;
  std::string key;             ///< the cache key, 64 hex digits
  std::string arch;            ///< "sm_90" (SASS) or "compute_90" (PTX, JIT-compiled by the driver)
  std::string lowered_name;    ///< the symbol launched ("saxpy", "_Z5scaleIfEvPT_S0_i")
  std::string nvrtc_version;   ///< "13.0"; empty when the kernel came from a cache without NVRTC
  std::string log;             ///< the NVRTC log of the compilation (warnings, ptxas report)
  double nvrtc_ms = 0;         ///< the NVRTC compilation time, of this call or of the cached entry
  double total_ms = 0;         ///< this call: key, cache lookup and (if needed) compilation
  int64_t headers_hashed = 0;  ///< headers whose contents went into the key
  bool replaced_corrupt_entry = false;  ///< a disk entry failed to verify and was recompiled
  /// Why the result was not written to disk, or "" when it was (or came from there): the cache
  /// is disabled, a computed #include defeats the dependency scan, the directory is not writable.
  std::string not_stored_reason;
  /// Why a disk entry was there but not used, or "": it failed to verify (and was replaced), or
  /// the directory is not this user's alone (group- or world-writable, another owner, a link).
  std::string not_loaded_reason;
};

/// A kernel parameter as the loaded kernel reports it.
struct Parameter {
  size_t offset = 0;
  size_t size = 0;
};

/// Three launch dimensions (x, y, z), each >= 1.
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  Dim3() = default;
  Dim3(uint32_t x_, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT
};

namespace detail {
struct Module;
}

class Kernel;

/// Compiles (or finds in the cache) `request.kernel` of `request.source`. A compile error
/// returns kCompileError with the NVRTC log (file(line): error: ...); NVRTC missing returns
/// kNotSupported; a bad option, an empty source or kernel name kInvalidArgument. Needs no GPU
/// when an -arch option is given. Thread-safe.
CUDAOPS_EXPORT Status compile(const CompileRequest& request, Kernel* out);

/// A compiled kernel. Copies share the same module; it stays loaded while any copy lives.
class CUDAOPS_EXPORT Kernel {
 public:
  Kernel();
  ~Kernel();
  Kernel(const Kernel&);
  Kernel& operator=(const Kernel&);
  Kernel(Kernel&&) noexcept;
  Kernel& operator=(Kernel&&) noexcept;

  bool valid() const noexcept { return module_ != nullptr; }
  const CompileInfo& info() const;  ///< requires valid()
  const Resources& resources() const;
  const std::string& ptx() const;          ///< the PTX NVRTC produced
  const std::vector<char>& cubin() const;  ///< the SASS image (empty for a compute_XY target)

  /// Loads the kernel for the current device (done by the first launch otherwise) and reports
  /// the limit for one block of it there.
  Status max_threads_per_block(int* out) const;
  /// The kernel's parameters (offset and size of each) on the current device.
  Status parameters(std::vector<Parameter>* out) const;

  /// Launches on `stream` with the current device. `args[i]` points to the value of parameter i
  /// (as for cudaLaunchKernel); `num_args` must equal the kernel's parameter count. Checks the
  /// dimensions against the device and the kernel (threads per block), and opts the kernel in
  /// to dynamic shared memory above 48 KiB when the device allows it. Asynchronous; allocates
  /// nothing.
  Status launch(Dim3 grid, Dim3 block, void* const* args, size_t num_args, size_t shared_mem,
                cudaStream_t stream) const;

 private:
  friend Status compile(const CompileRequest&, Kernel*);
  std::shared_ptr<detail::Module> module_;
  std::shared_ptr<const CompileInfo> info_;  // this compile() call's facts
};

/// The cache key compile() would use for `request` (64 hex digits), computed without NVRTC's
/// compilation: for tools and tests. Needs NVRTC (its version is in the key).
CUDAOPS_EXPORT Status cache_key(const CompileRequest& request, std::string* out);

/// The directory under CacheConfig::directory that holds the entries (its name changes with
/// the entry format).
inline constexpr const char kCacheSubdirectory[] = "jit-v2";

/// The cache settings of this process. Read from the environment on first use:
/// CUDAOPS_CACHE_DIR (else $XDG_CACHE_HOME/cudaops, else ~/.cache/cudaops), CUDAOPS_JIT_CACHE=0
/// to disable the disk cache, CUDAOPS_JIT_CACHE_MAX_BYTES (default 1 GiB; a value that is not a
/// positive integer turns the disk cache off, and compilations say so in not_stored_reason).
/// The directory and its entries are used only when this user alone can write them (owned by
/// the effective user, not group- or world-writable); entries carry a MAC under a per-user key.
struct CacheConfig {
  bool disk_enabled = true;
  std::string directory;                   ///< entries live in <directory>/jit-v2
  uint64_t max_bytes = uint64_t{1} << 30;  ///< oldest entries are evicted beyond this
};

CUDAOPS_EXPORT CacheConfig cache_config();
/// Replaces the settings (an empty directory means the default one). Thread-safe.
CUDAOPS_EXPORT Status set_cache_config(const CacheConfig& config);

/// Forgets every kernel of the in-process cache (kernels already returned stay usable) and/or
/// removes every entry of the disk cache directory.
CUDAOPS_EXPORT Status clear_cache(bool memory = true, bool disk = true);

/// The NVRTC in use ("13.0 (/usr/local/cuda/lib64/libnvrtc.so.13)"), loading it if needed.
CUDAOPS_EXPORT Status nvrtc_description(std::string* out);

}  // namespace cudaops::jit
