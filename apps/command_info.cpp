#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cold_start.h"
#include "commands.h"
#include "common.h"
#include "cudaops/kernels.h"
#include "cudaops/version.h"
#include "harness/device_info.h"
#include "harness/fatbin.h"

namespace cudaops::cli {
namespace {

struct InfoOptions {
  bool json = false;
  bool cold_start = false;
  std::string op = "add";
  std::string child_mode;  // set in the processes --cold-start starts
};

std::string carried_text(const std::vector<harness::FatbinEntry>& entries) {
  std::vector<std::string> sass, ptx;
  for (const auto& e : entries) {
    std::vector<std::string>& list = e.ptx ? ptx : sass;
    const std::string name = harness::arch_name(e.arch, e.ptx);
    bool seen = false;
    for (const auto& s : list)
      seen = seen || s == name;
    if (!seen) list.push_back(name);
  }
  std::string out;
  for (const auto& s : sass)
    out += (out.empty() ? "SASS " : ", ") + s;
  std::string p;
  for (const auto& s : ptx)
    p += (p.empty() ? "PTX " : ", ") + s;
  if (!p.empty()) out += (out.empty() ? "" : "; ") + p;
  return out.empty() ? "no GPU code" : out;
}

/// One row of the kernel report.
struct FamilyReport {
  KernelFamilyInfo info;
  Status status;
  harness::CodeChoice choice;
  std::vector<harness::FatbinEntry> carried;
  bool located = false;  ///< its own fat binary was found (else: what the whole binary carries)
};

std::vector<FamilyReport> kernel_report(const harness::FatbinContents& binary, int device_arch) {
  std::vector<FamilyReport> rows;
  for (int i = 0; i < kernel_family_count(); ++i) {
    FamilyReport row;
    row.status = kernel_family_info(i, &row.info);
    const std::vector<int> holders = harness::fatbins_holding(binary, row.info.kernel);
    row.located = holders.size() == 1;
    row.carried = harness::entries_of(binary, row.located ? holders[0] : -1);
    row.choice = harness::choose_code(row.carried, device_arch);
    rows.push_back(row);
  }
  return rows;
}

const char* kind_word(harness::CodeKind kind) {
  switch (kind) {
    case harness::CodeKind::kSass:
      return "sass";
    case harness::CodeKind::kPtx:
      return "ptx";
    case harness::CodeKind::kNone:
      break;
  }
  return "none";
}

void print_kernel_report(const std::vector<FamilyReport>& rows, int device_arch) {
  std::printf("  %-15s %-22s %5s %7s  %s\n", "kernel family", "runs from", "regs", "local",
              "carried");
  std::vector<std::string> warnings;
  std::string jit_families;
  for (const FamilyReport& row : rows) {
    std::string runs;
    if (!row.status.ok()) {
      runs = "no code for this GPU";
      warnings.push_back(std::string(row.info.name) + ": " + row.status.message());
    } else if (row.choice.kind == harness::CodeKind::kSass) {
      runs = "SASS " + harness::arch_name(row.choice.arch, false);
    } else if (row.choice.kind == harness::CodeKind::kPtx) {
      runs = "PTX " + harness::arch_name(row.choice.arch, true) + " (JIT)";
      jit_families += std::string(jit_families.empty() ? "" : ", ") + row.info.name;
    } else {
      runs = "nothing matches";
    }
    const bool mismatch = row.status.ok() && row.choice.kind == harness::CodeKind::kSass &&
                          row.info.binary_version != row.choice.arch;
    if (mismatch) {
      warnings.push_back(std::string(row.info.name) + ": the runtime reports code for sm_" +
                         std::to_string(row.info.binary_version) + ", the binary's headers say " +
                         harness::arch_name(row.choice.arch, false));
    }
    std::printf("  %-15s %-22s %5d %5lld B  %s%s\n", row.info.name, runs.c_str(),
                row.info.registers, static_cast<long long>(row.info.local_bytes),
                carried_text(row.carried).c_str(), row.located ? "" : " (whole binary)");
  }
  if (!jit_families.empty()) {
    warnings.push_back(jit_families +
                       ": only PTX matches this GPU. The driver compiles it when each kernel is "
                       "first loaded (slow first calls; cached in ~/.nv/ComputeCache) and the "
                       "code is not tuned for " +
                       harness::arch_name(device_arch, false) +
                       ". Build with CMAKE_CUDA_ARCHITECTURES including " +
                       std::to_string(device_arch) + ".");
  }
  for (const std::string& w : warnings)
    std::printf("  warning: %s\n", w.c_str());
}

void write_kernel_json(harness::JsonWriter& w, const std::vector<FamilyReport>& rows) {
  w.key("kernels").begin_array();
  for (const FamilyReport& row : rows) {
    w.begin_object().key("family").value(row.info.name).key("source").value(row.info.source);
    w.key("runs_from").value(row.status.ok() ? kind_word(row.choice.kind) : "none");
    w.key("arch").value(row.choice.arch);
    w.key("binary_version").value(row.info.binary_version);
    w.key("ptx_version").value(row.info.ptx_version);
    w.key("registers").value(row.info.registers);
    w.key("local_bytes").value(row.info.local_bytes);
    w.key("kernel").value(row.info.kernel ? row.info.kernel : "");
    if (!row.status.ok()) w.key("error").value(row.status.message());
    w.key("carried").begin_array();
    for (const auto& e : row.carried)
      w.value(harness::arch_name(e.arch, e.ptx));
    w.end_array().end_object();
  }
  w.end_array();
}

int execute(const InfoOptions& options) {
  if (!options.child_mode.empty()) return cold_start_child(options.op);
  harness::SystemInfo info;
  const Status status = harness::query_system(&info);
  harness::FatbinContents binary;
  const std::string path = harness::binary_of(reinterpret_cast<const void*>(&kernel_family_count));
  const Status read = path.empty() ? Status(StatusCode::kNotSupported, "binary not found")
                                   : harness::read_fatbins(path, &binary);
  const int device_arch =
      info.devices.empty() ? 0 : info.devices[0].major * 10 + info.devices[0].minor;
  std::vector<FamilyReport> rows;
  if (status.ok() && !info.devices.empty()) {
    if (cudaSetDevice(0) == cudaSuccess) rows = kernel_report(binary, device_arch);
  }
  if (options.json && options.cold_start) {
    // Only the cold-start report's JSON is printed.
  } else if (options.json) {
    harness::JsonWriter w;
    w.begin_object().key("version").value(version_string());
    w.key("architectures").value(build_cuda_architectures());
    w.key("runtime").value(harness::cuda_version_text(info.runtime_version));
    w.key("driver").value(harness::cuda_version_text(info.driver_version));
    w.key("binary").value(path);
    w.key("binary_carries").value(read.ok() ? carried_text(binary.entries) : read.message());
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
    w.end_array();
    if (!rows.empty()) write_kernel_json(w, rows);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("libcudaops %s\n", version_string());
    std::printf("  built for CUDA %s, architectures %s\n",
                harness::cuda_version_text(build_cuda_runtime_version()).c_str(),
                build_cuda_architectures());
    if (read.ok()) {
      std::printf("  %s: %d fat binaries, %s\n", path.c_str(), binary.fatbins,
                  carried_text(binary.entries).c_str());
    } else {
      std::printf("  GPU code of this binary not read: %s\n", read.message().c_str());
    }
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
      if (d.index == 0 && !rows.empty()) print_kernel_report(rows, device_arch);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "cudaops: no usable CUDA device: %s\n", status.message().c_str());
    return kExitNoGpu;
  }
  if (options.cold_start) {
    bool ptx_usable = false;
    for (const auto& e : binary.entries)
      ptx_usable = ptx_usable || (e.ptx && e.arch <= device_arch);
    return cold_start_report(options.op, info.devices[0].name, ptx_usable, options.json);
  }
  return kExitOk;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* parser = app.add_subcommand(
      "info",
      "devices, driver and runtime versions, the GPU code this build carries and how device 0 "
      "runs each kernel family (SASS built for it, or PTX compiled at load time)");
  parser->add_flag("--json", options->json, "machine-readable output");
  parser->add_flag("--cold-start", options->cold_start,
                   "time a fresh process: driver, context, module loading (lazy and eager), the "
                   "first launch of an op and its steady state");
  parser->add_option("--op", options->op, "the op --cold-start launches (default add)");
  parser->add_option("--cold-start-child", options->child_mode)->group("");
  return {parser, [options]() { return execute(*options); }};
}

}  // namespace cudaops::cli
