// The JIT on a GPU: compile for the device, launch and check against the host; template kernels;
// a non-default stream and graph capture; launch checks; dynamic shared memory above 48 KiB;
// a corrupted cache entry recompiled and launched; processes racing on one cache directory.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cudaops/jit.h"
#include "support/jit_race.h"

namespace {

namespace fs = std::filesystem;
using cudaops::StatusCode;
using namespace cudaops::jit;

const char* const kSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
template <typename T> __global__ void scale(T* x, T a, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a;
}
extern "C" __global__ void reverse_shared(float* out) {
  extern __shared__ float tile[];
  tile[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}
)";

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

class JitGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string description;
    if (!nvrtc_description(&description).ok()) GTEST_SKIP() << "NVRTC is not installed";
    char pattern[] = "/tmp/cudaops-jit-gpu-XXXXXX";
    dir_ = mkdtemp(pattern);
    saved_ = cache_config();
    CacheConfig config;
    config.directory = dir_;
    ASSERT_TRUE(set_cache_config(config).ok());
    ASSERT_TRUE(clear_cache().ok());
  }
  void TearDown() override {
    if (dir_.empty()) return;
    (void)clear_cache(true, false);
    (void)set_cache_config(saved_);
    std::error_code error;
    fs::remove_all(dir_, error);
  }
  static CompileRequest request(const std::string& kernel) {
    CompileRequest r;
    r.source = kSource;
    r.kernel = kernel;
    return r;
  }
  static std::string device_arch() {
    int device = 0, major = 0, minor = 0;
    (void)cudaGetDevice(&device);
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return "sm_" + std::to_string(major * 10 + minor);
  }
  // y = a * x + y on n elements with `kernel`, checked against the host.
  static void check_saxpy(const Kernel& kernel, int n, cudaStream_t stream) {
    std::mt19937 rng(n);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      x[i] = dist(rng);
      y[i] = dist(rng);
    }
    float *dx = nullptr, *dy = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dx), sizeof(float) * n));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dy), sizeof(float) * n));
    CUDA_OK(cudaMemcpy(dx, x.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy, y.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    float a = 1.75f;
    void* args[] = {&a, &dx, &dy, &n};
    const cudaops::Status status =
        kernel.launch((static_cast<uint32_t>(n) + 255) / 256, 256, args, 4, 0, stream);
    ASSERT_TRUE(status.ok()) << status.to_string();
    std::vector<float> out(n);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(out.data(), dy, sizeof(float) * n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      const double expected = 1.75 * static_cast<double>(x[i]) + y[i];
      ASSERT_NEAR(out[i], expected, 1e-6 * (1 + std::fabs(expected))) << "i = " << i;
    }
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dy));
  }
  std::string dir_;
  CacheConfig saved_;
};

TEST_F(JitGpu, CompilesForTheDeviceAndLaunches) {
  Kernel kernel;
  const cudaops::Status status = compile(request("saxpy"), &kernel);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(kernel.info().arch, device_arch());
  int max_threads = 0;
  ASSERT_TRUE(kernel.max_threads_per_block(&max_threads).ok());
  EXPECT_GE(max_threads, 256);
  std::vector<Parameter> parameters;
  ASSERT_TRUE(kernel.parameters(&parameters).ok());
  ASSERT_EQ(parameters.size(), 4u);
  EXPECT_EQ(parameters[0].size, 4u);
  EXPECT_EQ(parameters[1].size, 8u);
  for (int n : {1, 7, 199, 4097, (1 << 20) + 3})
    check_saxpy(kernel, n, nullptr);
}

TEST_F(JitGpu, TemplateKernelsThroughNameExpressions) {
  Kernel kf, kd;
  ASSERT_TRUE(compile(request("scale<float>"), &kf).ok());
  ASSERT_TRUE(compile(request("scale<double>"), &kd).ok());
  const long long n = 1000;
  std::vector<double> host(n);
  for (long long i = 0; i < n; ++i)
    host[i] = static_cast<double>(i) * 0.5;
  double* d = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(double) * n));
  CUDA_OK(cudaMemcpy(d, host.data(), sizeof(double) * n, cudaMemcpyHostToDevice));
  double a = 3.0;
  long long count = n;
  void* args[] = {&d, &a, &count};
  ASSERT_TRUE(kd.launch(4, 256, args, 3, 0, nullptr).ok());
  std::vector<double> out(n);
  CUDA_OK(cudaMemcpy(out.data(), d, sizeof(double) * n, cudaMemcpyDeviceToHost));
  for (long long i = 0; i < n; ++i)
    ASSERT_EQ(out[i], host[i] * 3.0);
  CUDA_OK(cudaFree(d));
}

TEST_F(JitGpu, NonDefaultStreamAndGraphCapture) {
  Kernel kernel;
  ASSERT_TRUE(compile(request("saxpy"), &kernel).ok());
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  check_saxpy(kernel, 12345, stream);

  const int n = 4096;
  float* x = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(float) * n));
  std::vector<float> ones(n, 1.0f);
  CUDA_OK(cudaMemcpy(x, ones.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  Kernel scale;
  ASSERT_TRUE(compile(request("scale<float>"), &scale).ok());
  float a = 2.0f;
  long long count = n;
  void* args[] = {&x, &a, &count};
  ASSERT_TRUE(scale.launch(1, 1, args, 3, 0, stream).ok());  // loaded before the capture
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaops::Status captured = scale.launch(n / 256, 256, args, 3, 0, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> out(n);
  CUDA_OK(cudaMemcpy(out.data(), x, sizeof(float) * n, cudaMemcpyDeviceToHost));
  EXPECT_EQ(out[0], 8.0f);  // x2 once before the capture, then twice by the graph
  EXPECT_EQ(out[n - 1], 4.0f);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFree(x));
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_F(JitGpu, LaunchChecks) {
  Kernel kernel;
  ASSERT_TRUE(compile(request("saxpy"), &kernel).ok());
  float a = 1;
  float* p = nullptr;
  int n = 0;
  void* args[] = {&a, &p, &p, &n};
  struct Case {
    Dim3 grid, block;
    size_t num_args, shared;
    const char* message;
  };
  const Case cases[] = {
      {{0}, {32}, 4, 0, "must be >= 1"},
      {{1}, {0}, 4, 0, "must be >= 1"},
      {{1}, {2048}, 4, 0, "threads per block"},
      {{1}, {32, 32, 2}, 4, 0, "threads per block"},
      {{1, 70000}, {32}, 4, 0, "above the device's limit"},
      {{1}, {32}, 3, 0, "takes 4 arguments, got 3"},
      {{1}, {32}, 4, size_t{1} << 30, "bytes per block"},
  };
  for (const Case& c : cases) {
    const cudaops::Status status =
        kernel.launch(c.grid, c.block, args, c.num_args, c.shared, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
  }
  void* null_arg[] = {&a, nullptr, &p, &n};
  EXPECT_EQ(kernel.launch(1, 32, null_arg, 4, 0, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a refused launch leaves no CUDA error behind";
}

TEST_F(JitGpu, DynamicSharedMemoryAbove48KiB) {
  Kernel kernel;
  ASSERT_TRUE(compile(request("reverse_shared"), &kernel).ok());
  int optin = 0;
  CUDA_OK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  if (optin < 64 * 1024) GTEST_SKIP() << "the device allows " << optin << " bytes per block";
  float* out = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(float) * 1024));
  void* args[] = {&out};
  const cudaops::Status status = kernel.launch(1, 1024, args, 1, 64 * 1024, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  std::vector<float> host(1024);
  CUDA_OK(cudaMemcpy(host.data(), out, sizeof(float) * 1024, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 1024; ++i)
    ASSERT_EQ(host[i], static_cast<float>(1023 - i));
  CUDA_OK(cudaFree(out));
}

TEST_F(JitGpu, CorruptedEntryIsRecompiledAndRuns) {
  Kernel first;
  ASSERT_TRUE(compile(request("saxpy"), &first).ok());
  const std::string path = dir_ + "/jit-v2/" + first.info().key + ".entry";
  ASSERT_TRUE(fs::exists(path));
  fs::resize_file(path, fs::file_size(path) / 2);  // truncated, as by a crash mid-copy
  ASSERT_TRUE(clear_cache(true, false).ok());
  Kernel second;
  ASSERT_TRUE(compile(request("saxpy"), &second).ok());
  EXPECT_EQ(second.info().source, CacheSource::kCompiled);
  EXPECT_TRUE(second.info().replaced_corrupt_entry);
  check_saxpy(second, 1000, nullptr);
  ASSERT_TRUE(clear_cache(true, false).ok());
  Kernel third;
  ASSERT_TRUE(compile(request("saxpy"), &third).ok());
  EXPECT_EQ(third.info().source, CacheSource::kDiskCache);
  check_saxpy(third, 1000, nullptr);
}

TEST_F(JitGpu, ProcessesRacingOnOneDirectory) {
  // The children compile for this device's architecture without touching CUDA (fork after the
  // runtime is initialised is safe when the child makes no CUDA call); the parent then loads the
  // entry they raced to write and runs it.
  CompileRequest r = request("saxpy");
  r.options = {"-arch=" + device_arch()};
  ASSERT_TRUE(cudaops::test::CompileInRacingProcesses(r, 4));
  Kernel kernel;
  ASSERT_TRUE(compile(r, &kernel).ok());
  EXPECT_EQ(kernel.info().source, CacheSource::kDiskCache);
  check_saxpy(kernel, 4097, nullptr);
}

}  // namespace
