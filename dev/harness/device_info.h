#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cudaops/status.h"

namespace cudaops::harness {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  int multiprocessors = 0;
  int64_t total_memory = 0;
  int64_t free_memory = 0;
  int64_t l2_cache = 0;
  int memory_bus_width = 0;
  std::string pci_bus_id;
};

struct SystemInfo {
  int driver_version = 0;   ///< 0 when no driver is installed
  int runtime_version = 0;  ///< of the CUDA runtime this program carries
  std::vector<DeviceInfo> devices;
};

/// Versions and every visible device. Fails (kCudaError) when no device can be used; the versions
/// are filled in as far as they could be read.
Status query_system(SystemInfo* info);

/// "12.8" from 12080.
std::string cuda_version_text(int version);

}  // namespace cudaops::harness
