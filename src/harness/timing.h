#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "cudaops/status.h"

namespace cudaops::harness {

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int iterations = 0;
};

/// Times fn on stream with a pair of CUDA events around each of `iterations` calls, after
/// `warmup` untimed calls; one synchronisation at the end.
Status time_on_stream(const std::function<Status(cudaStream_t)>& fn, cudaStream_t stream,
                      int warmup, int iterations, Timing* timing);

/// Achieved bandwidth in GB/s (1e9 bytes per second).
inline double gb_per_s(int64_t bytes, double ms) {
  return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0.0;
}

/// Device-to-device cudaMemcpyAsync of `bytes`, counting bytes read plus bytes written: the
/// memory ceiling every op is measured against.
Status measure_copy_bandwidth(int64_t bytes, int warmup, int iterations, double* gbps,
                              Timing* timing = nullptr);

/// The copy size used as the yardstick: 1 GiB, or a quarter of free memory if that is less.
int64_t default_copy_bytes();

}  // namespace cudaops::harness
