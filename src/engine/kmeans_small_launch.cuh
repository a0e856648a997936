#pragma once

// The host side of the small problems' fit (small_fit_kernel, kmeans_small.cuh): whether a call's
// problems take it and with how many blocks a problem (plan_small_fit), and its launch
// (launch_small_fit).
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/launch_config.h"
#include "engine/kmeans_small.cuh"

namespace cudaops::detail::kmeans {
namespace {

/// Whether small problems take small_fit_kernel, and how, from the environment variable
/// CUDAOPS_KMEANS_SMALL (read once): unset, the plan's choice; 0, never (the tests then run the
/// iterations launch by launch at the same shapes); "fewest", the fewest blocks a problem (so that
/// the tests reach blocks of up to 512 points at shapes where the plan spreads them thinner).
inline int small_fit_setting() {
  static const int setting = [] {
    const char* value = std::getenv("CUDAOPS_KMEANS_SMALL");
    if (value == nullptr) return -1;
    if (std::strcmp(value, "0") == 0) return 0;
    return std::strcmp(value, "fewest") == 0 ? 1 : -1;
  }();
  return setting;
}

/// How a call's problems take small_fit_kernel: `blocks` blocks per problem (0: they do not) of
/// `rows` points each (a multiple of 32); `smem` bytes of dynamic shared memory a block.
struct SmallPlan {
  int blocks = 0;
  int rows = 0;
  size_t smem = 0;
};

/// The 16-row tiles a warp's products take in blocks of `rows` points (16 warps a block).
inline int small_tiles(int64_t rows) {
  return rows <= kSmallMaxRows / 2 ? 1 : 2;
}

/// *count = the problems of `blocks` blocks of `kernel` with `smem` bytes each that the current
/// device holds at once (asked once per device, kernel, blocks and smem).
template <typename Kernel>
Status resident_problems(Kernel kernel, int blocks, size_t smem, int* count) {
  struct Known {
    int device;
    const void* kernel;
    int blocks;
    size_t smem;
    int count;
  };
  static std::mutex mutex;
  static std::vector<Known> known;
  *count = 0;
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) {
    return cuda_status(error, kOp, "querying the device");
  }
  const void* key = reinterpret_cast<const void*>(kernel);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const Known& k : known) {
      if (k.device == device && k.kernel == key && k.blocks == blocks && k.smem == smem) {
        *count = k.count;
        return Status();
      }
    }
  }
  if (Status s = allow_smem(kernel, smem); !s.ok()) return s;
  cudaError_t error = cudaSuccess;
  if (blocks > 1) {
    const LaunchConfig one(static_cast<unsigned>(blocks), kSmallThreads, smem, nullptr, blocks);
    error = cudaOccupancyMaxActiveClusters(count, kernel, &one.config());
  } else {
    int per_sm = 0, sms = 0;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSmallThreads, smem);
    if (error == cudaSuccess) {
      error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    *count = per_sm * sms;
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // returned here, not left for a later launch to report
    *count = 0;
    return cuda_status(error, kOp, "sizing the small problems' fit");
  }
  const std::lock_guard<std::mutex> lock(mutex);
  known.push_back({device, key, blocks, smem, *count});
  return Status();
}

/// Whether small_fit_kernel fits call's problems, and how (*plan; plan->blocks = 0 where it does
/// not: too many points or clusters, too wide, too little shared memory, or several blocks a
/// problem without clusters). Of 1 to kSmallMaxBlocks blocks a problem, the plan takes the one of
/// the fewest points a block times waves of the batch (the fewer blocks on a tie): more blocks
/// share the products and the sums, as long as the batch fits the device at once (32 problems of
/// 1024 points take 3 blocks of 352 on an H100, where clusters of 4 fit 30 at once).
template <typename T>
Status plan_small_fit(const Call& call, SmallPlan* plan) {
  *plan = SmallPlan();
  const KmeansPoints& p = call.points;
  // float32 rows round to TF32 in the products: their means are subtracted before, by the
  // other kernels.
  if (std::is_same_v<T, float> && call.center) return Status();
  const int setting = small_fit_setting();
  if (setting == 0 || call.k > kSmallMaxK || p.n > int64_t{kSmallMaxBlocks} * kSmallMaxRows ||
      p.n < 1 || call.d_pad * static_cast<int64_t>(sizeof(T)) > 16 * kWarp) {
    return Status();
  }
  int64_t best_cost = INT64_MAX;
  for (int blocks = 1; blocks <= kSmallMaxBlocks; ++blocks) {
    const int64_t rows = ((p.n + blocks - 1) / blocks + 31) / 32 * 32;
    if (rows > kSmallMaxRows) continue;
    const int tiles = small_tiles(rows);
    const SmallLayout l = small_layout(static_cast<int>(call.k), static_cast<int>(call.d_pad),
                                       sizeof(T), blocks, static_cast<int>(rows));
    // The kernel's shared memory and registers are the same for every kL.
    const auto kernel = tiles == 1 ? small_fit_kernel<T, kWarp, 1> : small_fit_kernel<T, kWarp, 2>;
    size_t room = 0;
    if (Status s = max_dynamic_smem(kOp, reinterpret_cast<const void*>(kernel), &room); !s.ok()) {
      return s;
    }
    if (static_cast<size_t>(l.bytes) > room) continue;
    if (blocks > 1) {
      bool ok = false;
      if (Status s = clusters_allowed(kOp, reinterpret_cast<const void*>(kernel), &ok); !s.ok()) {
        return s;
      }
      if (!ok) continue;
    }
    int resident = 0;
    if (Status s = resident_problems(kernel, blocks, static_cast<size_t>(l.bytes), &resident);
        !s.ok()) {
      return s;
    }
    if (resident < 1) continue;
    const int64_t cost = (p.batch + resident - 1) / resident * rows;
    if (cost < best_cost) {
      best_cost = cost;
      *plan = SmallPlan{blocks, static_cast<int>(rows), static_cast<size_t>(l.bytes)};
      if (setting == 1) break;  // the fewest blocks
    }
  }
  return Status();
}

/// Launches small_fit_kernel with kL lanes a row and kM tiles a warp.
template <typename T, int kL, int kM>
Status launch_small_kernel(const SmallArgs<T>& args, int64_t batch, size_t smem,
                           cudaStream_t stream) {
  const auto kernel = small_fit_kernel<T, kL, kM>;
  if (Status s = allow_smem(kernel, smem); !s.ok()) return s;
  const LaunchConfig launch(static_cast<unsigned>(batch * args.blocks), kSmallThreads, smem, stream,
                            args.blocks > 1 ? args.blocks : 0);
  if (const cudaError_t error = launch.launch(kernel, args); error != cudaSuccess) {
    return cuda_status(error, kOp, "launching the small problems' fit");
  }
  return launched(stream);
}

/// Runs n_iters iterations of call's fit and the last assignment in one launch of `blocks` blocks
/// per problem: call.centroids holds the initial centroids (with strided_init, the kernel takes
/// and writes them there), and the fitted ones after;
/// call.labels the last labels, or `out_labels` (by the rows' offsets, as results are) where
/// given, and, with `distances`, call.scores each point's distance to its centroid. With `keeps`,
/// the updates skip the clusters no point joined or left, and a problem ends once none moves.
template <typename T>
Status launch_small_fit(const Call& call, int n_iters, const SmallPlan& plan, bool strided_init,
                        bool distances, int32_t* out_labels, bool keeps, cudaStream_t stream) {
  const bool cosine = call.metric == KmeansMetric::kCosine;
  const SmallArgs<T> args{
      rows_of<T>(call.points),
      static_cast<int>(call.k),
      static_cast<int>(call.points.d),
      static_cast<int>(call.d_pad),
      plan.blocks,
      n_iters,
      metric_alpha(cosine),
      cosine,
      call.center ? call.means : nullptr,
      call.centroids,
      strided_init,
      small_layout(static_cast<int>(call.k), static_cast<int>(call.d_pad), sizeof(T), plan.blocks,
                   plan.rows),
      call.points.d % 4 == 0 && reinterpret_cast<uintptr_t>(call.centroids) % 16 == 0,
      out_labels != nullptr ? out_labels : call.labels,
      out_labels != nullptr,
      distances ? call.scores : nullptr,
      keeps,
      call.done,
      call.tf32};
  // Rows of at most 32 pieces (plan_small_fit): one piece a lane.
  return with_row_lanes<T>(call.d_pad, [&](auto lanes, auto pieces) {
    if constexpr (decltype(pieces)::value == 1) {
      constexpr int kL = decltype(lanes)::value;
      return small_tiles(plan.rows) == 1
                 ? launch_small_kernel<T, kL, 1>(args, call.points.batch, plan.smem, stream)
                 : launch_small_kernel<T, kL, 2>(args, call.points.batch, plan.smem, stream);
    } else {
      return Status();  // (not reached)
    }
  });
}

}  // namespace
}  // namespace cudaops::detail::kmeans
