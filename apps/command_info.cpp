#include <cstdio>
#include <memory>

#include "commands.h"
#include "common.h"
#include "cudaops/version.h"
#include "harness/device_info.h"

namespace cudaops::cli {
namespace {

int execute(bool json) {
  harness::SystemInfo info;
  const Status status = harness::query_system(&info);
  if (json) {
    harness::JsonWriter w;
    w.begin_object().key("version").value(version_string());
    w.key("architectures").value(build_cuda_architectures());
    w.key("runtime").value(harness::cuda_version_text(info.runtime_version));
    w.key("driver").value(harness::cuda_version_text(info.driver_version));
    if (!status.ok()) w.key("error").value(status.message());
    w.key("devices").begin_array();
    for (const auto& d : info.devices) {
      w.begin_object().key("index").value(d.index).key("name").value(d.name);
      w.key("compute_capability").value(std::to_string(d.major) + "." + std::to_string(d.minor));
      w.key("multiprocessors").value(d.multiprocessors).key("memory_bytes").value(d.total_memory);
      w.key("free_bytes").value(d.free_memory).key("l2_bytes").value(d.l2_cache);
      w.key("memory_bus_bits").value(d.memory_bus_width).key("pci_bus_id").value(d.pci_bus_id);
      w.end_object();
    }
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("libcudaops %s\n", version_string());
    std::printf("  built for CUDA %s, architectures %s\n",
                harness::cuda_version_text(build_cuda_runtime_version()).c_str(),
                build_cuda_architectures());
    std::printf("  CUDA runtime %s, driver %s\n",
                harness::cuda_version_text(info.runtime_version).c_str(),
                harness::cuda_version_text(info.driver_version).c_str());
    for (const auto& d : info.devices) {
      std::printf("device %d: %s (compute capability %d.%d, %s)\n", d.index, d.name.c_str(),
                  d.major, d.minor, d.pci_bus_id.c_str());
      std::printf("  %d SMs, %.1f GiB memory (%.1f GiB free), %.0f MiB L2, %d-bit bus\n",
                  d.multiprocessors, static_cast<double>(d.total_memory) / (1 << 30),
                  static_cast<double>(d.free_memory) / (1 << 30),
                  static_cast<double>(d.l2_cache) / (1 << 20), d.memory_bus_width);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "cudaops: no usable CUDA device: %s\n", status.message().c_str());
    return kExitNoGpu;
  }
  return kExitOk;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* parser = app.add_subcommand(
      "info", "devices, driver and runtime versions, and the architectures this build carries");
  parser->add_flag("--json", *json, "machine-readable output");
  return {parser, [json]() { return execute(*json); }};
}

}  // namespace cudaops::cli
