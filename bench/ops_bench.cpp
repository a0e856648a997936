// Google Benchmark over every registered op, dtype, size of its sweep and pointer offset 0 and 1,
// timed with CUDA events (manual time), with a device-to-device copy as the yardstick: each case
// reports bytes/s and "of_copy", its bandwidth in percent of the copy's measured in this run.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "harness/cuda_util.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "harness/timing.h"

namespace cudaops::harness {
namespace {

double g_copy_gbps = 0.0;

// CUDA-event timing of one call per benchmark iteration.
class EventLap {
 public:
  EventLap() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~EventLap() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start(cudaStream_t stream) { cudaEventRecord(start_, stream); }
  double stop_seconds(cudaStream_t stream) {
    cudaEventRecord(stop_, stream);
    cudaEventSynchronize(stop_);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// bytes/s, and "of_copy": the achieved bandwidth in percent of the copy's. `bytes` is what one
// iteration (one lap) moves; `seconds` the sum of the laps' times.
void report_rates(benchmark::State& state, int64_t bytes, double seconds) {
  const double moved = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(moved));
  state.counters["of_copy"] =
      g_copy_gbps > 0 && seconds > 0 ? 100.0 * moved / seconds / 1e9 / g_copy_gbps : 0.0;
}

// Launches per timed iteration (a lap): back to back until about 64 MiB have moved, so that small
// sizes measure the kernel and not the latency of a single launch. The reported time is a lap's.
int64_t launches_per_iteration(int64_t bytes) {
  const int64_t batch = bytes > 0 ? (int64_t{64} << 20) / bytes : 1;
  return batch < 1 ? 1 : (batch > 256 ? 256 : batch);
}

// Google Benchmark calls a benchmark function more than once; the inputs of the case being
// measured are kept between calls (one case at a time, to bound memory).
std::unique_ptr<OpCase> g_case;
std::string g_case_key;

void bench_case(benchmark::State& state, const OpDescriptor* op, CaseConfig config) {
  const std::string key = op->name + dtype_name(config.dtype) + format_dims(config.dims) +
                          std::to_string(config.offset);
  if (key != g_case_key) {
    g_case.reset();
    g_case_key.clear();
    const Status status = op->make_case(config, &g_case);
    if (!status.ok()) {
      state.SkipWithError(status.to_string().c_str());
      return;
    }
    g_case_key = key;
  }
  Stream stream;
  if (!stream.create().ok()) {
    state.SkipWithError("cudaStreamCreate failed");
    return;
  }
  for (int i = 0; i < 3; ++i)
    (void)g_case->run(stream.get());
  const int64_t batch = launches_per_iteration(g_case->bytes_moved());
  EventLap lap;
  double total = 0.0;
  for (auto _ : state) {
    lap.start(stream.get());
    Status status;
    for (int64_t i = 0; i < batch && status.ok(); ++i)
      status = g_case->run(stream.get());
    const double seconds = lap.stop_seconds(stream.get());
    if (!status.ok()) {
      state.SkipWithError(status.to_string().c_str());
      return;
    }
    state.SetIterationTime(seconds);
    total += seconds;
  }
  state.counters["launches_per_lap"] = static_cast<double>(batch);
  report_rates(state, batch * g_case->bytes_moved(), total);
}

void bench_copy(benchmark::State& state, int64_t bytes) {
  DeviceBuffer src, dst;
  if (!src.allocate(bytes).ok() || !dst.allocate(bytes).ok()) {
    state.SkipWithError("cudaMalloc failed");
    return;
  }
  cudaMemset(src.get(), 0x3c, static_cast<size_t>(bytes));
  Stream stream;
  if (!stream.create().ok()) {
    state.SkipWithError("cudaStreamCreate failed");
    return;
  }
  EventLap lap;
  double total = 0.0;
  for (auto _ : state) {
    lap.start(stream.get());
    cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                    stream.get());
    const double seconds = lap.stop_seconds(stream.get());
    state.SetIterationTime(seconds);
    total += seconds;
  }
  report_rates(state, 2 * bytes, total);
}

void register_all() {
  const int64_t copy_bytes = default_copy_bytes();
  benchmark::RegisterBenchmark(("copy/bytes:" + std::to_string(2 * copy_bytes)).c_str(), bench_copy,
                               copy_bytes)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Repetitions(5)
      ->ReportAggregatesOnly(true);
  for (const OpDescriptor& op : registered_ops()) {
    for (DType dtype : op.dtypes) {
      for (const Dims& dims : op.bench_shapes) {
        for (int64_t offset : {0, 1}) {
          std::string name = op.name + "/" + dtype_name(dtype);
          for (const auto& [key, value] : dims)
            name += "/" + key + ":" + std::to_string(value);
          name += "/offset:" + std::to_string(offset);
          benchmark::RegisterBenchmark(name.c_str(), bench_case, &op,
                                       CaseConfig{dtype, dims, 1, offset})
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(0.05)
              ->Repetitions(3)
              ->ReportAggregatesOnly(true);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cudaops::harness

int main(int argc, char** argv) {
  using namespace cudaops::harness;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  std::string why;
  if (!cuda_device_usable(&why)) {
    std::fprintf(stderr, "cudaops_bench: no usable CUDA device: %s\n", why.c_str());
    return 3;
  }
  const cudaops::Status status = measure_copy_bandwidth(default_copy_bytes(), 3, 20, &g_copy_gbps);
  if (!status.ok()) {
    std::fprintf(stderr, "cudaops_bench: %s\n", status.to_string().c_str());
    return 1;
  }
  benchmark::AddCustomContext("copy_gbps", std::to_string(g_copy_gbps));
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  g_case.reset();
  benchmark::Shutdown();
  return 0;
}
