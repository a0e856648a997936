// cudaops jit FILE.cu --kernel NAME: compile a kernel with the JIT and report what it costs.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cudaops/jit.h"
#include "harness/device_info.h"

namespace cudaops::cli {
namespace {

struct JitOptions {
  std::string file;
  std::string kernel;
  std::vector<std::string> defines;
  std::vector<std::string> include_dirs;
  std::vector<std::string> extra;
  std::string arch;
  std::string ptx_out;
  std::string cubin_out;
  bool no_cache = false;
  bool json = false;
  int device = 0;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

bool write_file(const std::string& path, const char* data, size_t size) {
  std::ofstream file(path, std::ios::binary);
  file.write(data, static_cast<std::streamsize>(size));
  return static_cast<bool>(file);
}

int execute(const JitOptions& options) {
  std::ifstream file(options.file, std::ios::binary);
  if (!file) throw UsageError{"cannot read " + options.file};
  jit::CompileRequest request;
  request.source.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  request.kernel = options.kernel;
  request.file_name = options.file;
  for (const std::string& define : options.defines)
    request.options.push_back("-D" + define);
  for (const std::string& dir : options.include_dirs)
    request.options.push_back("-I" + dir);
  for (const std::string& extra : options.extra)
    request.options.push_back(extra);
  if (!options.arch.empty()) request.options.push_back("-arch=" + options.arch);

  if (options.no_cache) {
    jit::CacheConfig config = jit::cache_config();
    config.disk_enabled = false;
    (void)jit::set_cache_config(config);
  }
  // Without --arch the kernel is for this machine's GPU, and is loaded there too. The context is
  // made first so that its cost (the same for every CUDA program) stays out of the JIT's figure.
  const bool on_device = options.arch.empty();
  double context_ms = 0;
  if (on_device) {
    if (!select_device(options.device, options.json)) {
      if (!options.json) {
        std::fprintf(stderr,
                     "cudaops: to compile for a GPU that is not here, name it: --arch sm_XY "
                     "(e.g. --arch sm_90)\n");
      }
      return kExitNoGpu;
    }
    const auto start = std::chrono::steady_clock::now();
    const cudaError_t error = cudaFree(nullptr);
    context_ms = ms_since(start);
    if (error != cudaSuccess) {
      std::fprintf(stderr, "cudaops: creating the CUDA context failed: %s\n",
                   cudaGetErrorString(error));
      return kExitNoGpu;
    }
  }

  const auto start = std::chrono::steady_clock::now();
  jit::Kernel kernel;
  Status status = jit::compile(request, &kernel);
  const double compile_ms = ms_since(start);
  if (!status.ok()) {
    std::fprintf(stderr, "cudaops: %s\n", status.to_string().c_str());
    if (options.json) print_json_error("compiling " + options.kernel, status.to_string());
    return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitCheckFailed;
  }
  int max_threads = -1;
  double load_ms = 0;
  if (on_device) {
    const auto load_start = std::chrono::steady_clock::now();
    status = kernel.max_threads_per_block(&max_threads);
    load_ms = ms_since(load_start);
    if (!status.ok()) return report_failure(status, "loading the kernel", options.json);
  }
  const double ready_ms = ms_since(start);

  if (!options.ptx_out.empty() &&
      !write_file(options.ptx_out, kernel.ptx().data(), kernel.ptx().size())) {
    std::fprintf(stderr, "cudaops: cannot write %s\n", options.ptx_out.c_str());
    return kExitUsage;
  }
  if (!options.cubin_out.empty() &&
      !write_file(options.cubin_out, kernel.cubin().data(), kernel.cubin().size())) {
    std::fprintf(stderr, "cudaops: cannot write %s\n", options.cubin_out.c_str());
    return kExitUsage;
  }

  const jit::CompileInfo& info = kernel.info();
  const jit::Resources& r = kernel.resources();
  const jit::CacheConfig cache = jit::cache_config();
  std::string nvrtc;
  (void)jit::nvrtc_description(&nvrtc);
  if (options.json) {
    harness::JsonWriter w;
    w.begin_object()
        .key("kernel")
        .value(options.kernel)
        .key("lowered_name")
        .value(info.lowered_name);
    w.key("arch").value(info.arch).key("source").value(jit::cache_source_name(info.source));
    w.key("key").value(info.key).key("headers_hashed").value(info.headers_hashed);
    w.key("registers").value(r.registers).key("barriers").value(r.barriers);
    w.key("stack_frame_bytes").value(r.stack_frame_bytes);
    w.key("spill_store_bytes").value(r.spill_store_bytes);
    w.key("spill_load_bytes").value(r.spill_load_bytes);
    w.key("static_shared_bytes").value(r.static_shared_bytes);
    w.key("max_threads_per_block").value(max_threads);
    w.key("context_ms").value(context_ms).key("compile_call_ms").value(compile_ms);
    w.key("load_ms").value(load_ms).key("ready_ms").value(ready_ms);
    w.key("nvrtc_ms").value(info.nvrtc_ms).key("nvrtc").value(nvrtc);
    w.key("replaced_corrupt_entry").value(info.replaced_corrupt_entry);
    w.key("cache_dir")
        .value(cache.disk_enabled ? cache.directory + "/" + jit::kCacheSubdirectory : "");
    w.key("not_stored_reason").value(info.not_stored_reason);
    w.key("not_loaded_reason").value(info.not_loaded_reason);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
    return kExitOk;
  }
  std::printf("kernel     %s -> %s, %s (NVRTC %s)\n", options.kernel.c_str(),
              info.lowered_name.c_str(), info.arch.c_str(), nvrtc.c_str());
  if (r.registers >= 0) {
    std::printf(
        "resources  %d registers, %lld B spill stores, %lld B spill loads, %lld B stack, "
        "%lld B static shared, %d barriers\n",
        r.registers, static_cast<long long>(r.spill_store_bytes),
        static_cast<long long>(r.spill_load_bytes), static_cast<long long>(r.stack_frame_bytes),
        static_cast<long long>(r.static_shared_bytes), r.barriers);
  } else {
    std::printf("resources  not known: a PTX target is compiled by the driver when loaded\n");
  }
  if (max_threads >= 0) {
    std::printf("limits     %d threads per block on device %d\n", max_threads, options.device);
  }
  std::printf("from       %s%s\n", jit::cache_source_name(info.source),
              info.replaced_corrupt_entry ? " (a corrupt disk entry was found and replaced)" : "");
  std::printf("time       %.2f ms to a %s kernel: compile() %.2f ms%s", ready_ms,
              on_device ? "launchable" : "compiled", compile_ms, on_device ? "" : "\n");
  if (on_device) {
    std::printf(", load %.2f ms (CUDA context %.1f ms before, not counted)\n", load_ms, context_ms);
  }
  std::printf("nvrtc      %.1f ms %s\n", info.nvrtc_ms,
              info.source == jit::CacheSource::kCompiled ? "in this call" : "when it was compiled");
  std::printf("key        %s (%lld headers hashed)\n", info.key.c_str(),
              static_cast<long long>(info.headers_hashed));
  if (!cache.disk_enabled) {
    std::printf("cache      %s\n", info.not_stored_reason.empty() ? "disk cache disabled"
                                                                  : info.not_stored_reason.c_str());
  } else {
    std::printf(
        "cache      %s/%s%s%s\n", cache.directory.c_str(), jit::kCacheSubdirectory,
        info.not_stored_reason.empty() ? "" : "; not stored: ", info.not_stored_reason.c_str());
  }
  if (!info.not_loaded_reason.empty()) {
    std::printf("not loaded %s\n", info.not_loaded_reason.c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_jit_command(CLI::App& app) {
  auto options = std::make_shared<JitOptions>();
  CLI::App* parser = app.add_subcommand(
      "jit",
      "compile a kernel at run time (NVRTC, with the disk cache) and report its registers, "
      "spills, shared memory, compile time and whether it came from the cache");
  parser->add_option("file", options->file, "CUDA C++ source file")->required();
  parser
      ->add_option("--kernel,-k", options->kernel,
                   "the __global__ function, or a name expression (\"scale<float>\")")
      ->required();
  parser->add_option("-D", options->defines, "define a macro: -DNAME or -DNAME=VALUE");
  parser->add_option("-I", options->include_dirs, "add an include directory");
  parser->add_option("--arch", options->arch,
                     "target (sm_90, compute_90); default: the GPU's, which also loads the kernel");
  parser
      ->add_option("--option", options->extra,
                   "another NVRTC option, as --option=-lineinfo or --option=--use_fast_math")
      ->allow_extra_args(false);
  parser->add_option("--ptx", options->ptx_out, "write the PTX to this file");
  parser->add_option("--cubin", options->cubin_out, "write the SASS image (cubin) to this file");
  parser->add_flag("--no-cache", options->no_cache, "neither read nor write the disk cache");
  parser->add_option("--device", options->device, "device index")->check(non_negative_integer());
  parser->add_flag("--json", options->json, "machine-readable output");
  return {parser, [options]() { return execute(*options); }};
}

}  // namespace cudaops::cli
