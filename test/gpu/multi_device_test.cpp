// Several GPUs in one process: every op, through its harness descriptor, on device 1 and on
// device 0 in turn and from two threads at once (one device each), at shapes that take the
// per-device queries (row-wise rows split over clusters, top-k's cluster tiles, k-means' kernel
// choice); the current device is never changed by a call; a JIT kernel compiled with device 0
// current is launched on device 1. Skipped with fewer than two devices.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cudaops/jit.h"
#include "harness/registry.h"

namespace cudaops {
namespace {

using harness::CaseConfig;
using harness::Dims;

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void Set(Dims* dims, const std::string& name, int64_t value) {
  for (auto& [key, v] : *dims) {
    if (key == name) v = value;
  }
}

/// The shapes each op is run at: small enough for the CPU reference, large enough for the paths
/// whose choice asks the device (cluster sizes, occupancy, the kernel image).
std::vector<Dims> ShapesOf(const harness::OpDescriptor& op) {
  Dims base = harness::default_dims(op);
  std::vector<Dims> shapes;
  if (op.name == "add" || op.name == "add_scalar") {
    Set(&base, "n", (int64_t{1} << 20) + 3);
    shapes.push_back(base);
  } else if (op.name == "topk") {
    shapes.push_back(base);  // 64 x 65536: rows of two cluster tiles
    Set(&base, "cols", 300000);
    Set(&base, "rows", 3);
    shapes.push_back(base);  // sampled rows of many tiles, a workspace
  } else if (op.name == "kmeans") {
    Set(&base, "batch", 4);
    Set(&base, "n", 2048);
    Set(&base, "d", 64);
    Set(&base, "k", 32);
    Set(&base, "n_iters", 3);
    shapes.push_back(base);
  } else if (op.name == "ivf_build" || op.name == "ivf_search") {
    Set(&base, "heads", 2);
    Set(&base, "seq", 3000);
    Set(&base, "dim", 64);
    Set(&base, "clusters", 64);
    Set(&base, "segments", 2);
    Set(&base, "n_iters", 3);
    Set(&base, "q_heads", 4);
    Set(&base, "k", 100);
    Set(&base, "n_probe", 8);
    shapes.push_back(base);
  } else {  // the row-wise family
    Set(&base, "rows", 64);
    Set(&base, "cols", 131072);
    shapes.push_back(base);  // split over a cluster
    Set(&base, "rows", 2048);
    Set(&base, "cols", 1024);
    shapes.push_back(base);  // cached
  }
  return shapes;
}

/// Runs and checks every op, dtype and shape on the current device, which must be `device`
/// before and after each call. Returns the failures, one line each.
std::vector<std::string> CheckEveryOp(int device) {
  std::vector<std::string> failures;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return {"device " + std::to_string(device) + ": cudaStreamCreate failed"};
  }
  for (const harness::OpDescriptor& op : harness::registered_ops()) {
    for (DType dtype : op.dtypes) {
      for (const Dims& dims : ShapesOf(op)) {
        std::ostringstream name;
        name << "device " << device << ": " << op.name << " " << dtype_name(dtype) << " "
             << harness::format_dims(dims) << ": ";
        CaseConfig config;
        config.dtype = dtype;
        config.dims = dims;
        config.seed = 7;
        std::unique_ptr<harness::OpCase> c;
        Status s = op.make_case(config, &c);
        ref::CompareResult result;
        if (s.ok()) s = c->check(stream, &result);
        int now = -1;
        (void)cudaGetDevice(&now);
        if (!s.ok()) {
          failures.push_back(name.str() + s.message());
        } else if (!result.ok()) {
          failures.push_back(name.str() + result.describe());
        }
        if (now != device) {
          failures.push_back(name.str() + "the current device became " + std::to_string(now));
        }
      }
    }
  }
  (void)cudaStreamDestroy(stream);
  return failures;
}

std::string Lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines)
    text += line + "\n";
  return text;
}

TEST(MultiDevice, EveryOpOnEachDeviceInTurn) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  // Device 1 first: its per-device state is made while device 0 has none yet, then device 0's.
  for (int device : {1, 0, 1}) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    const std::vector<std::string> failures = CheckEveryOp(device);
    EXPECT_TRUE(failures.empty()) << Lines(failures);
  }
}

TEST(MultiDevice, TwoThreadsOnTwoDevices) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  std::vector<std::string> failures[2];
  std::vector<std::thread> threads;
  for (int device = 0; device < 2; ++device) {
    threads.emplace_back([device, &failures] {
      if (cudaSetDevice(device) != cudaSuccess) {
        failures[device].push_back("cudaSetDevice(" + std::to_string(device) + ") failed");
        return;
      }
      for (int round = 0; round < 2; ++round) {
        for (std::string& f : CheckEveryOp(device))
          failures[device].push_back(std::move(f));
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  EXPECT_TRUE(failures[0].empty()) << Lines(failures[0]);
  EXPECT_TRUE(failures[1].empty()) << Lines(failures[1]);
}

// A kernel compiled with device 0 current is loaded on device 1 at its first launch there.
TEST(MultiDevice, JitKernelCompiledOnOneDeviceRunsOnAnother) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  jit::CompileRequest request;
  request.source =
      "extern \"C\" __global__ void fill(float* out, float value, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) out[i] = value + i;\n"
      "}\n";
  request.kernel = "fill";
  jit::Kernel kernel;
  const Status compiled = jit::compile(request, &kernel);
  if (compiled.code() == StatusCode::kNotSupported) GTEST_SKIP() << compiled.message();
  ASSERT_TRUE(compiled.ok()) << compiled.message();
  for (int device : {1, 0}) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    constexpr int kN = 1000;
    float* d_out = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), kN * sizeof(float)), cudaSuccess);
    float value = 0.5f + static_cast<float>(device);
    int n = kN;
    void* args[] = {&d_out, &value, &n};
    ASSERT_TRUE(kernel.launch({(kN + 127) / 128, 1, 1}, {128, 1, 1}, args, 3, 0, nullptr).ok());
    std::vector<float> host(kN);
    ASSERT_EQ(cudaMemcpy(host.data(), d_out, kN * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (int i = 0; i < kN; ++i)
      ASSERT_EQ(host[i], value + static_cast<float>(i)) << "device " << device << " index " << i;
    int now = -1;
    ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
    EXPECT_EQ(now, device);
    ASSERT_EQ(cudaFree(d_out), cudaSuccess);
  }
}

}  // namespace
}  // namespace cudaops
