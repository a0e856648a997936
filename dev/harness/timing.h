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
  int calls = 1;  ///< calls per timed run; the times above are per call
};

/// Times fn on stream with a pair of CUDA events around each of `iterations` runs of `calls`
/// calls back to back, after `warmup` untimed calls; one synchronisation at the end. The times
/// are per call: a run's over `calls`. One call per run measures what a lone call takes, its
/// launch and its first and last blocks included; several measure the rate of calls that follow
/// each other in a stream, as a model's layers do.
Status time_on_stream(const std::function<Status(cudaStream_t)>& fn, cudaStream_t stream,
                      int warmup, int iterations, Timing* timing, int calls = 1);

/// Achieved bandwidth in GB/s (1e9 bytes per second).
inline double gb_per_s(int64_t bytes, double ms) {
  return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0.0;
}

/// Device-to-device cudaMemcpyAsync of `bytes`, counting bytes read plus bytes written: the
/// memory ceiling every op is measured against.
Status measure_copy_bandwidth(int64_t bytes, int warmup, int iterations, double* gbps,
                              Timing* timing = nullptr, int calls = 1);

/// The copy size used as the yardstick: 1 GiB, or a quarter of free memory if that is less.
int64_t default_copy_bytes();

}  // namespace cudaops::harness
