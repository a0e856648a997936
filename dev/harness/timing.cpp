#include "harness/timing.h"

#include <algorithm>
#include <vector>

#include "harness/cuda_util.h"
#include "harness/device_buffer.h"

namespace cudaops::harness {
namespace {

class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : events_)
      cudaEventDestroy(e);
  }
  Status create(size_t count) {
    events_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      cudaEvent_t e = nullptr;
      Status status = cuda_check(cudaEventCreate(&e), "cudaEventCreate");
      if (!status.ok()) return status;
      events_.push_back(e);
    }
    return Status();
  }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

Status time_on_stream(const std::function<Status(cudaStream_t)>& fn, cudaStream_t stream,
                      int warmup, int iterations, Timing* timing, int calls) {
  if (iterations < 1) iterations = 1;
  if (calls < 1) calls = 1;
  for (int i = 0; i < warmup; ++i) {
    Status status = fn(stream);
    if (!status.ok()) return status;
  }
  EventPool events;
  Status status = events.create(2 * static_cast<size_t>(iterations));
  if (!status.ok()) return status;
  for (int i = 0; i < iterations; ++i) {
    status = cuda_check(cudaEventRecord(events[2 * i], stream), "cudaEventRecord");
    for (int c = 0; c < calls && status.ok(); ++c)
      status = fn(stream);
    if (status.ok())
      status = cuda_check(cudaEventRecord(events[2 * i + 1], stream), "cudaEventRecord");
    if (!status.ok()) return status;
  }
  status = cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after timing");
  if (!status.ok()) return status;
  std::vector<double> ms(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    float elapsed = 0.0f;
    status = cuda_check(cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]),
                        "cudaEventElapsedTime");
    if (!status.ok()) return status;
    ms[static_cast<size_t>(i)] = static_cast<double>(elapsed) / calls;
  }
  std::sort(ms.begin(), ms.end());
  const size_t mid = ms.size() / 2;
  timing->median_ms = ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
  timing->min_ms = ms.front();
  timing->max_ms = ms.back();
  timing->iterations = iterations;
  timing->calls = calls;
  return Status();
}

int64_t default_copy_bytes() {
  constexpr int64_t kGiB = int64_t{1} << 30;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return kGiB;
  }
  return std::min<int64_t>(kGiB, static_cast<int64_t>(free_bytes / 4));
}

Status measure_copy_bandwidth(int64_t bytes, int warmup, int iterations, double* gbps,
                              Timing* timing, int calls) {
  DeviceBuffer src;
  DeviceBuffer dst;
  Status status = src.allocate(bytes);
  if (status.ok()) status = dst.allocate(bytes);
  if (status.ok())
    status = cuda_check(cudaMemset(src.get(), 0x3c, static_cast<size_t>(bytes)), "cudaMemset");
  if (!status.ok()) return status;
  Stream stream;
  status = stream.create();
  if (!status.ok()) return status;
  Timing t;
  status = time_on_stream(
      [&](cudaStream_t s) {
        return cuda_check(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes),
                                          cudaMemcpyDeviceToDevice, s),
                          "cudaMemcpyAsync device to device");
      },
      stream.get(), warmup, iterations, &t, calls);
  if (!status.ok()) return status;
  *gbps = gb_per_s(2 * bytes, t.median_ms);
  if (timing) *timing = t;
  return Status();
}

}  // namespace cudaops::harness
