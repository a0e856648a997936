#include "rowwise/rowwise_launch.h"

#include "core/kernel_families.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/dispatch.cuh"
#include "core/launch.h"
#include "core/validate.h"
#include "device/numeric.cuh"
#include "device/vector.cuh"
#include "rowwise/row_common.cuh"
#include "rowwise/row_pipeline.cuh"

namespace cudaops::detail::rowwise {

const char* row_path_name(RowPath path) {
  switch (path) {
    case RowPath::kCached:
      return "cached";
    case RowPath::kSplit:
      return "split";
    case RowPath::kSplitRows:
      return "split_rows";
    case RowPath::kPipelined:
      return "pipelined";
    case RowPath::kStreamed:
      return "streamed";
    case RowPath::kLong:
      return "long";
    case RowPath::kNone:
      break;
  }
  return "none";
}

Status check_shape(const char* op, int64_t rows, int64_t cols) {
  if (Status s = check_count(op, "rows", rows); !s.ok()) return s;
  if (Status s = check_count(op, "cols", cols); !s.ok()) return s;
  // rows x cols x 8 bytes bounds every matrix and workspace (K <= 2 float32 per column and unit,
  // units <= rows) the ops and their size queries compute.
  int64_t bytes = 0;
  if (checked_product({rows, cols, 8}, &bytes)) return Status();
  std::ostringstream text;
  text << op << ": rows (" << rows << ") x cols (" << cols << ") is more elements than 64-bit "
       << "offsets can address";
  return Status(StatusCode::kInvalidArgument, text.str());
}

Status check_eps(const char* op, float eps) {
  if (eps > 0.0f && std::isfinite(eps)) return Status();
  std::ostringstream text;
  text << op << ": eps must be > 0 and finite, got " << eps;
  return Status(StatusCode::kInvalidArgument, text.str());
}

Status current_device_limits(const char* op, DeviceLimits* limits) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&limits->sms, cudaDevAttrMultiProcessorCount, device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&limits->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                   device);
  }
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  return Status();
}

Status occupancy_cap_smem(const char* op, const void* kernel, int threads, int blocks,
                          size_t* smem) {
  *smem = 0;
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  struct Entry {
    const void* kernel;
    int device;
    int threads;
    int blocks;
    size_t smem;
  };
  static std::mutex mutex;
  static std::vector<Entry> known;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : known) {
      if (e.kernel == kernel && e.device == device && e.threads == threads && e.blocks == blocks) {
        *smem = e.smem;
        return Status();
      }
    }
  }
  int major = 0;
  int per_sm = 0;
  error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  size_t chosen = 0;
  int resident = 0;
  error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, 0);
  if (error != cudaSuccess) return cuda_status(error, op, "sizing the launch");
  if (major == 9 && resident >= blocks) {
    cudaFuncAttributes attributes = {};
    error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) return cuda_status(error, op, "querying the kernel");
    // Each block takes its static and dynamic shared memory and the 1 KiB the system reserves;
    // the largest dynamic size that leaves room for `blocks` of them, less 1 KiB at a time
    // until the occupancy calculator agrees (allocation granularity).
    constexpr int64_t kReserved = 1024;
    int64_t bytes =
        int64_t{per_sm} / blocks - kReserved - static_cast<int64_t>(attributes.sharedSizeBytes);
    bytes = bytes / 1024 * 1024;
    for (; bytes > 0; bytes -= 1024) {
      if (bytes > 48 * 1024) {
        error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes));
        if (error != cudaSuccess) return cuda_status(error, op, "setting the shared-memory size");
      }
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads,
                                                            static_cast<size_t>(bytes));
      if (error != cudaSuccess) return cuda_status(error, op, "sizing the launch");
      if (resident >= blocks) break;
    }
    chosen = bytes > 0 && resident == blocks ? static_cast<size_t>(bytes) : 0;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  known.push_back({kernel, device, threads, blocks, chosen});
  *smem = chosen;
  return Status();
}

Status plan_streamed(const char* op, const void* kernel, int arrays, int64_t cols, int n,
                     DType dtype, StreamedLaunch* launch) {
  int64_t threads = ((cols + n - 1) / n + 3) / 4;
  threads = std::clamp<int64_t>((threads + 31) / 32 * 32, 64, 1024);
  launch->threads = static_cast<int>(threads);
  launch->smem = 0;
  DeviceLimits limits;
  if (Status s = current_device_limits(op, &limits); !s.ok()) return s;
  const int64_t want = int64_t{arrays} * padded_cols(cols) * dtype_size(dtype);
  // Leave room for the static shared memory of the reductions.
  if (want > int64_t{limits.smem_optin} - 1024) return Status();
  if (want > 48 * 1024) {
    const cudaError_t error = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(want));
    if (error != cudaSuccess) return cuda_status(error, op, "setting the shared-memory size");
  }
  launch->smem = static_cast<size_t>(want);
  return Status();
}

int max_cluster_size() {
  static const int limit = [] {
    const char* value = std::getenv("CUDAOPS_MAX_CLUSTER_SIZE");
    if (value == nullptr || *value == '\0') return kMaxNonPortableSplit;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (*end != '\0' || n < 0) return kMaxNonPortableSplit;  // not a count: the default
    return static_cast<int>(std::min<long>(n, kMaxNonPortableSplit));
  }();
  return limit;
}

Status split_parts(const char* op, const void* kernel, int64_t cols, int64_t part_cols, int* parts,
                   int max_parts) {
  *parts = 0;
  max_parts = std::min(max_parts, max_cluster_size());
  if (max_parts < 2 || cols <= part_cols || cols > max_parts * part_cols) return Status();
  cudaFuncAttributes attributes = {};
  bool ok = false;
  if (Status s = cluster_image(op, kernel, &attributes, &ok); !s.ok() || !ok) return s;
  const int wanted = static_cast<int>((cols + part_cols - 1) / part_cols);
  if (wanted > kMaxSplit) {
    const cudaError_t error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();  // a device without non-portable clusters: the rows stay whole
      return Status();
    }
  }
  *parts = wanted;
  return Status();
}

Status plan_pipelined(const char* op, const void* kernel, int vecs, int max_threads, int arrays,
                      int blocks_per_sm, int64_t rows, int64_t cols, DType dtype,
                      PipeLaunch* launch) {
  *launch = PipeLaunch();
  if (rows == 0 || cols == 0) return Status();
  const int64_t size = dtype_size(dtype);
  const int64_t vec = 16 / size;
  if (cols % vec != 0) return Status();  // whole 16-byte vectors only
  const int64_t chunks = cols / vec;
  int64_t threads = (chunks + vecs - 1) / vecs;
  threads = std::max<int64_t>((threads + 31) / 32 * 32, 64);
  if (threads > max_threads) return Status();
  cudaFuncAttributes attributes = {};
  bool ok = false;
  if (Status s = cluster_image(op, kernel, &attributes, &ok); !s.ok() || !ok) return s;
  DeviceLimits limits;
  if (Status s = current_device_limits(op, &limits); !s.ok()) return s;
  const int64_t stage_bytes = int64_t{arrays} * cols * size;
  // An SM's shared memory is the opt-in limit of one block plus the 1 KiB the system reserves
  // per block; each of blocks_per_sm blocks has its share of it less its own reserve.
  constexpr int64_t kReserved = 1024;
  const int64_t share = (int64_t{limits.smem_optin} + kReserved) / blocks_per_sm - kReserved;
  const int64_t budget = share - static_cast<int64_t>(attributes.sharedSizeBytes);
  const int64_t stages = std::min<int64_t>(kMaxStages, budget / stage_bytes);
  if (stages < 1) return Status();
  PipeLaunch plan;
  plan.params.stages = static_cast<int>(stages);
  plan.threads = static_cast<int>(threads);
  plan.smem = static_cast<size_t>(stages * stage_bytes);
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(plan.smem));
  if (error != cudaSuccess) return cuda_status(error, op, "setting the shared-memory size");
  int per_sm = 0;
  error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, plan.threads, plan.smem);
  if (error != cudaSuccess) return cuda_status(error, op, "sizing the launch");
  if (per_sm < 1) return Status();
  plan.blocks = static_cast<unsigned>(std::min<int64_t>(rows, int64_t{limits.sms} * per_sm));
  *launch = plan;
  return Status();
}

namespace {

// A block sums kReduceLanes * V columns: lane x of group y adds units y, y + kReduceGroups, ...
// (kReduceUnroll loads in flight at once), then the groups' sums meet in a fixed tree.
constexpr int kReduceLanes = 32;
constexpr int kReduceGroups = 16;
constexpr int kReduceUnroll = 4;
// Columns from which the blocks take vectors of 4 (cols / 128 blocks or more per accumulator).
constexpr int64_t kReduceVectorFrom = 16384;

template <typename T, int V>
__global__ void __launch_bounds__(kReduceLanes* kReduceGroups)
    reduce_partials_kernel(const float* partials, int64_t units, int64_t cols, T* out0, T* out1) {
  enter_rows_kernel();
  __shared__ float sums[kReduceGroups][V][kReduceLanes + 1];
  const int lane = threadIdx.x % kReduceLanes;
  const int group = threadIdx.x / kReduceLanes;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kReduceLanes + lane) * V;
  const float* base = partials + static_cast<int64_t>(blockIdx.y) * units * cols + c;
  float sum[V];
#pragma unroll
  for (int v = 0; v < V; ++v)
    sum[v] = 0.0f;
  if (c < cols) {
    // kReduceUnroll loads issued before any is added (an unrolled loop of one load and its adds
    // was compiled to two loads at a time).
    int64_t u = group;
    for (; u + (kReduceUnroll - 1) * kReduceGroups < units; u += kReduceUnroll * kReduceGroups) {
      Vec<float, V> got[kReduceUnroll];
#pragma unroll
      for (int k = 0; k < kReduceUnroll; ++k)
        got[k] = load_vec<float, V>(base + (u + k * kReduceGroups) * cols);
#pragma unroll
      for (int k = 0; k < kReduceUnroll; ++k) {
#pragma unroll
        for (int v = 0; v < V; ++v)
          sum[v] += got[k].v[v];
      }
    }
    for (; u < units; u += kReduceGroups) {
      const Vec<float, V> got = load_vec<float, V>(base + u * cols);
#pragma unroll
      for (int v = 0; v < V; ++v)
        sum[v] += got.v[v];
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v)
    sums[group][v][lane] = sum[v];
  __syncthreads();
#pragma unroll
  for (int half = kReduceGroups / 2; half > 0; half /= 2) {
    if (group < half) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        sums[group][v][lane] += sums[group + half][v][lane];
    }
    __syncthreads();
  }
  if (group == 0 && c < cols) {
    T* out = blockIdx.y == 0 ? out0 : out1;
#pragma unroll
    for (int v = 0; v < V; ++v)
      out[c + v] = from_float<T>(sums[0][v][lane]);
  }
}

}  // namespace

Status launch_reduce_partials(const char* op, const float* partials, int64_t units, int64_t cols,
                              void* const* outputs, int accumulators, DType dtype,
                              cudaStream_t stream) {
  if (cols == 0) return Status();
  return dispatch_float(op, dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out0 = static_cast<T*>(outputs[0]);
    T* out1 = static_cast<T*>(accumulators > 1 ? outputs[1] : outputs[0]);
    const auto launch = [&](auto kernel, int v) {
      const int64_t per_block = int64_t{kReduceLanes} * v;
      const dim3 grid(static_cast<unsigned>((cols + per_block - 1) / per_block),
                      static_cast<unsigned>(accumulators));
      kernel<<<grid, kReduceLanes * kReduceGroups, 0, stream>>>(partials, units, cols, out0, out1);
      return check_launch(op, stream);
    };
    // Vectors of 4 partials where every partial row starts 16-byte aligned, and the columns
    // leave enough blocks to fill the device.
    if (cols % 4 == 0 && cols >= kReduceVectorFrom && aligned16(partials))
      return launch(reduce_partials_kernel<T, 4>, 4);
    return launch(reduce_partials_kernel<T, 1>, 1);
  });
}

namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(reduce_partials_kernel<float, 1>);
}
CUDAOPS_KERNEL_FAMILY("rowwise_reduce", "rowwise_launch.cu", family_kernel);
}  // namespace

}  // namespace cudaops::detail::rowwise
