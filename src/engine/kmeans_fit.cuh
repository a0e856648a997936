#pragma once

// Batched k-means: the host sequence of a call (fit and assign), launching the kernels of
// kmeans_kernels.cuh, kmeans_assign.cuh and kmeans_update.cuh on the caller's stream; included by
// one translation unit per dtype (src/kmeans/kmeans_<dtype>.cu), which instantiates it.
#include "engine/kmeans_kernels.cuh"

namespace cudaops::detail::kmeans {
namespace {

template <typename T, typename C>
Status launch_operand(const Call& call, const C* centroids, cudaStream_t stream) {
  const int64_t items = call.points.batch * call.k;
  const bool cosine = call.metric == KmeansMetric::kCosine;
  operand_kernel<T, C><<<blocks_for(items, 8), 256, 0, stream>>>(
      centroids, call.points.batch, call.k, static_cast<int>(call.points.d),
      static_cast<int>(call.d_pad), cosine, call.tf32, call.fold_means ? call.means : nullptr,
      static_cast<T*>(call.operand), call.bias);
  return launched(stream);
}

/// Labels and distances by row (from call.labels and call.scores), sizes and the objective; the
/// distances are not read where neither they nor the objective are asked for.
template <typename T>
Status launch_results(const Call& call, int32_t* out_labels, float* out_distances, int32_t* sizes,
                      float* objective, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  if (sizes != nullptr) {
    const size_t bytes = static_cast<size_t>(p.batch * call.k) * sizeof(int32_t);
    if (const cudaError_t error = cudaMemsetAsync(sizes, 0, bytes, stream); error != cudaSuccess)
      return cuda_status(error, kOp, "clearing the sizes");
  }
  const bool distances = out_distances != nullptr || objective != nullptr;
  // A block per 4096 rows where no objective is summed (the global pass of the IVF build: 32
  // problems of 131072 rows would be 32 blocks).
  const int64_t per_part = objective != nullptr ? std::max<int64_t>(p.n, 1) : 4096;
  const int64_t parts = (std::max<int64_t>(p.n, 1) + per_part - 1) / per_part;
  FinishArgs<T> args{rows_of<T>(p), call.labels,   distances ? call.scores : nullptr,
                     out_labels,    out_distances, sizes,
                     objective,     call.k,        parts,
                     per_part};
  finish_kernel<T><<<blocks_for(p.batch * parts, 1), 256, 0, stream>>>(args);
  return launched(stream);
}

/// Distances of every point to its centroid, then labels (and distances) by row, sizes and the
/// objective. Without distances or an objective to give (the IVF build's calls), no distances.
template <typename T, typename C>
Status launch_finish(const Call& call, const C* centroids, int32_t* out_labels,
                     float* out_distances, int32_t* sizes, float* objective, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  if (out_distances == nullptr && objective == nullptr) {
    return launch_results<T>(call, out_labels, nullptr, sizes, nullptr, stream);
  }
  const DistanceArgs<T, C> distance{
      rows_of<T>(p), call.labels,           centroids, call.center ? call.means : nullptr,
      call.k,        static_cast<int>(p.d), p.batch,   call.metric == KmeansMetric::kCosine,
      call.scores};
  with_row_lanes<T>(p.d, [&](auto lanes, auto pieces) {
    constexpr int kL = decltype(lanes)::value, kQ = decltype(pieces)::value;
    const int64_t per_block = 8 * (kWarp / kL) * (kQ == 1 ? 4 : 2);  // points a block takes
    distance_kernel<T, C, kL, kQ>
        <<<blocks_for(p.batch * p.n, per_block), 256, 0, stream>>>(distance);
  });
  if (Status s = launched(stream); !s.ok()) return s;
  return launch_results<T>(call, out_labels, out_distances, sizes, objective, stream);
}

/// call with fold_means set where its assignment takes the slab kernel (sm_90a, 16-bit points).
template <typename T>
Status with_folded_means(const Call& given, Call* call) {
  *call = given;
#if !defined(CUDAOPS_NO_SM90A)
  if constexpr (!std::is_same_v<T, float>) return assign_folds_means<T>(given, &call->fold_means);
#endif
  return Status();
}

}  // namespace

template <typename T>
Status fit(const Call& given, const KmeansParams& params, const KmeansResult& result,
           cudaStream_t stream) {
  Call call;
  if (Status s = with_folded_means<T>(given, &call); !s.ok()) return s;
  const KmeansPoints& p = call.points;
  const int d = static_cast<int>(p.d);
  const bool cosine = call.metric == KmeansMetric::kCosine;
  const float* means = call.center ? call.means : nullptr;
  if (call.compute_means) {
    means_kernel<T><<<static_cast<unsigned>((d + 31) / 32 * p.batch), 256, 0, stream>>>(
        rows_of<T>(p), d, call.means);
    if (Status s = launched(stream); !s.ok()) return s;
  }
  const int64_t items = p.batch * call.k;
  Init init = Init::kStrided;
  if (params.init == KmeansInit::kRandom) {
    init = Init::kRandom;
    const int64_t words = (p.n + 31) / 32;
    if (const cudaError_t error = cudaMemsetAsync(
            call.bitmap, 0, static_cast<size_t>(p.batch * words) * sizeof(uint32_t), stream);
        error != cudaSuccess) {
      return cuda_status(error, kOp, "clearing the sample's bitmap");
    }
    random_rows_kernel<T><<<blocks_for(p.batch, 128), 128, 0, stream>>>(
        rows_of<T>(p), p.batch, call.k, params.seed, call.bitmap, words, call.rows);
    if (Status s = launched(stream); !s.ok()) return s;
  } else if (params.init == KmeansInit::kGiven) {
    init = Init::kGiven;
  }
  // Small problems run every iteration, and the last assignment, in one launch
  // (kmeans_small.cuh).
  SmallPlan small;
  if (params.empty == KmeansEmpty::kKeep && params.n_iters > 0) {
    if (Status s = plan_small_fit<T>(call, &small); !s.ok()) return s;
  }
  const int small_blocks = small.blocks;
  if (call.small_blocks != nullptr) *call.small_blocks = small_blocks;
  // The small problems' kernel takes strided initial centroids itself (a launch less).
  const bool strided_init = small_blocks > 0 && init == Init::kStrided;
  if (!strided_init) {
    if (init == Init::kGiven && result.centroid_dtype != DType::kFloat32) {
      init_kernel<T, T><<<blocks_for(items, 8), 256, 0, stream>>>(
          rows_of<T>(p), d, p.batch, call.k, init, call.rows,
          static_cast<const T*>(result.centroids), means, cosine, call.centroids);
    } else {
      init_kernel<T, float><<<blocks_for(items, 8), 256, 0, stream>>>(
          rows_of<T>(p), d, p.batch, call.k, init, call.rows,
          static_cast<const float*>(result.centroids), means, cosine, call.centroids);
    }
    if (Status s = launched(stream); !s.ok()) return s;
  }
  // The points' weights do not change: written once, then reused. Cosine's by the first update's
  // sums (they read every row; the slab kernel's producer would take twice as long), L2's (for
  // re-seeding) by the first assignment.
  Call first = call, again = call;
  if (cosine) first.point_w = nullptr;
  again.point_w = nullptr;
  again.moved = nullptr;  // (every assignment but the loop's own, below, assigns every problem)
  // Labels alone are written by the small problems' kernel where they go.
  const bool labels_alone =
      result.labels != nullptr && result.sizes == nullptr && result.objective == nullptr;
  if (small_blocks > 0) {
    // The points' distances only where the objective is asked for.
    if (Status s = launch_small_fit<T>(
            call, params.n_iters, small, strided_init, result.objective != nullptr,
            labels_alone ? result.labels : nullptr, !full_updates(), stream);
        !s.ok())
      return s;
  }
  // The operand rows of the initial centroids; then each update's sums write those of the new
  // ones, except where empty clusters are re-seeded after them.
  const bool reseeds = params.empty == KmeansEmpty::kFarthest;
  const bool marks = small_blocks == 0 && marks_changes(call);
  if (small_blocks == 0) {
    if (Status s = launch_operand<T, float>(call, call.centroids, stream); !s.ok()) return s;
  }
  for (int iter = 0; small_blocks == 0 && iter < params.n_iters; ++iter) {
    // Odd iterations assign into prev_labels, so that each update has the assignment before.
    Call step = iter == 0 ? first : again, update = call;
    // From the third on, a problem none of whose points changed at the last update keeps its
    // labels and scores (no centroid moved); not where re-seeding may move its empty clusters'.
    step.moved = iter >= 2 && !reseeds && marks ? call.moved : nullptr;
    if (iter % 2 == 1 && call.prev_labels != nullptr) {
      std::swap(step.labels, step.prev_labels);
      std::swap(update.labels, update.prev_labels);
    }
    if (Status s = launch_assign<T>(step, stream); !s.ok()) return s;
    if (Status s = launch_update<T>(update, !reseeds, iter > 0 && marks, stream); !s.ok()) return s;
    if (reseeds) {
      reseed_kernel<T><<<static_cast<unsigned>(p.batch), 256, 0, stream>>>(
          rows_of<T>(p), d, call.k, call.counts, call.scores, call.point_w, means, cosine,
          call.centroids);
      if (Status s = launched(stream); !s.ok()) return s;
      if (Status s = launch_operand<T, float>(call, call.centroids, stream); !s.ok()) return s;
    }
  }
  // Nothing of the last assignment is asked for (the IVF build's global pass assigns again).
  const bool last =
      result.labels != nullptr || result.sizes != nullptr || result.objective != nullptr;
  if (small_blocks > 0) {
    // The last assignment and the distances were the small problems' kernel's (and labels
    // alone are already where they go).
    if (last && !labels_alone) {
      if (Status s = launch_results<T>(call, result.labels, nullptr, result.sizes, result.objective,
                                       stream);
          !s.ok())
        return s;
    }
  } else if (last) {
    if (Status s = launch_assign<T>(again, stream); !s.ok()) return s;
    if (Status s = launch_finish<T, float>(call, call.centroids, result.labels, nullptr,
                                           result.sizes, result.objective, stream);
        !s.ok())
      return s;
  }
  if (result.centroid_dtype != DType::kFloat32) {
    convert_kernel<T><<<blocks_for(items * d, 256), 256, 0, stream>>>(
        call.centroids, items * d, static_cast<T*>(result.centroids));
    if (Status s = launched(stream); !s.ok()) return s;
  }
  return Status();
}

template <typename T>
Status assign(const Call& given, const KmeansCentroids& centroids, int32_t* labels,
              float* distances, cudaStream_t stream) {
  Call call;
  if (Status s = with_folded_means<T>(given, &call); !s.ok()) return s;
  if (centroids.dtype == DType::kFloat32) {
    const auto* c = static_cast<const float*>(centroids.data);
    if (Status s = launch_operand<T, float>(call, c, stream); !s.ok()) return s;
    if (Status s = launch_assign<T>(call, stream); !s.ok()) return s;
    return launch_finish<T, float>(call, c, labels, distances, nullptr, nullptr, stream);
  }
  const auto* c = static_cast<const T*>(centroids.data);
  if (Status s = launch_operand<T, T>(call, c, stream); !s.ok()) return s;
  if (Status s = launch_assign<T>(call, stream); !s.ok()) return s;
  return launch_finish<T, T>(call, c, labels, distances, nullptr, nullptr, stream);
}

}  // namespace cudaops::detail::kmeans

#define CUDAOPS_KMEANS_INSTANTIATE(T)                                                              \
  template cudaops::Status cudaops::detail::kmeans::fit<T>(const Call&, const KmeansParams&,       \
                                                           const KmeansResult&, cudaStream_t);     \
  template cudaops::Status cudaops::detail::kmeans::assign<T>(const Call&, const KmeansCentroids&, \
                                                              int32_t*, float*, cudaStream_t);
