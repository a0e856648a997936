#include "harness/device_info.h"

#include <cuda_runtime_api.h>

#include "harness/cuda_util.h"

namespace cudaops::harness {

std::string cuda_version_text(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

Status query_system(SystemInfo* info) {
  *info = SystemInfo{};
  if (cudaDriverGetVersion(&info->driver_version) != cudaSuccess) info->driver_version = 0;
  if (cudaRuntimeGetVersion(&info->runtime_version) != cudaSuccess) info->runtime_version = 0;
  int count = 0;
  Status status = cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!status.ok()) {
    cudaGetLastError();
    return status;
  }
  int current = 0;
  status = cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  if (!status.ok()) return status;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    status = cuda_check(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
    if (!status.ok()) return status;
    DeviceInfo device;
    device.index = d;
    device.name = prop.name;
    device.major = prop.major;
    device.minor = prop.minor;
    device.multiprocessors = prop.multiProcessorCount;
    device.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
    device.l2_cache = prop.l2CacheSize;
    device.memory_bus_width = prop.memoryBusWidth;
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, d) == cudaSuccess) device.pci_bus_id = bus_id;
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (cudaSetDevice(d) == cudaSuccess &&
        cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      device.free_memory = static_cast<int64_t>(free_bytes);
    }
    cudaGetLastError();
    info->devices.push_back(device);
  }
  return cuda_check(cudaSetDevice(current), "cudaSetDevice");
}

}  // namespace cudaops::harness
