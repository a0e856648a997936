#pragma once

// The strategy ladder of the row-wise ops whose rows are independent (softmax, softmax_backward
// and the norms' forward passes), written once: which kernel a shape takes, with its launch.
//
//   1. cached:    the row fits a block's registers (kCachedLadder, up to the op's kCachedCount);
//   2. split:     an aligned row too long for that, split over the blocks of a cluster (sm_90+);
//   3. pipelined: rows brought into shared memory stages by a persistent grid (ops that have one);
//   4. streamed:  anything else, the row walked in chunks (16-byte ones when aligned).
//
// Each op supplies a small traits type (softmax_api.cu, norm_forward.cuh):
//
//   using Type = T;                                    // the element type
//   static constexpr int kCachedCount;                 // rungs of kCachedLadder it uses
//   template <int kThreads, int kVecs, bool kSplit>
//   static constexpr auto cached();                    // its cached (or split) kernel
//   template <int kThreads, int kVecs>
//   static constexpr int cap_blocks();                 // blocks per SM to hold it to (0: none)
//   static constexpr bool kWideSplit;                  // launch_if_split's kWide
//   static constexpr int kRowsPerCluster;              // rows each cluster takes in turn
//   bool splits(int64_t cols) const;                   // whether an aligned row may split
//   Status split_rows(op, stream, dry, launched) const;// a split kernel tried first, if any
//   static constexpr bool kPipelined;                  // whether it has a pipelined kernel
//   static constexpr auto pipelined(); static constexpr PipeShape kPipe;
//   using StreamedKernel = ...;                        // the streamed kernel's pointer type
//   Status streamed(op, aligned, kernel*, launch*) const; // the streamed kernel and its launch
//   auto row_args() const;                             // the kernels' arguments, as a tuple
//   auto streamed_args() const;                        // the streamed kernel's, less its last
#include <tuple>

#include "core/dispatch.cuh"
#include "rowwise/row_common.cuh"
#include "rowwise/row_exchange.cuh"
#include "rowwise/row_pipeline.cuh"
#include "rowwise/rowwise_launch.h"

namespace cudaops::detail::rowwise {

/// What most ops' traits say: no cap on blocks per SM, rows split as launch_if_split does one
/// at a time, no split kernel tried first. Traits derive from it and say what differs.
struct RowOpDefaults {
  template <int kThreads, int kVecs>
  static constexpr int cap_blocks() {
    return 0;
  }
  static constexpr bool kWideSplit = false;
  static constexpr int kRowsPerCluster = 1;
  static bool splits(int64_t) { return true; }
  static Status split_rows(const char*, cudaStream_t, RowPlan*, bool* launched) {
    *launched = false;
    return Status();
  }
};

/// A pipelined kernel's launch shape (plan_pipelined's arguments).
struct PipeShape {
  int vecs;
  int max_threads;
  int arrays;
  int blocks_per_sm;
};

/// Runs the ladder for `o` over rows x cols (both > 0): launches the first rung that takes the
/// shape, or, with `dry` not null, launches nothing and says in *dry which rung and launch it
/// would be.
template <class Op>
Status run_row_ladder(const char* op, const Op& o, int64_t rows, int64_t cols, bool aligned,
                      cudaStream_t stream, RowPlan* dry) {
  using T = typename Op::Type;
  constexpr int V = kVec16<T>;
  constexpr DType dtype = kDTypeOf<T>;
  const int config = aligned ? pick_cached(cols, V, Op::kCachedCount) : -1;
  if (config >= 0) {
    return with_cached_shape<Op::kCachedCount>(config, [&](auto shape) {
      using S = decltype(shape);
      constexpr int kRows = kRowsPerBlock<S::threads>;
      const auto kernel = Op::template cached<S::threads, S::vecs, false>();
      size_t smem = 0;
      constexpr int kCap = Op::template cap_blocks<S::threads, S::vecs>();
      if constexpr (kCap > 0) {
        if (Status s = occupancy_cap_smem(op, reinterpret_cast<const void*>(kernel),
                                          kBlockThreads<S::threads>, kCap, &smem);
            !s.ok())
          return s;
      }
      const unsigned grid = grid_for((rows + kRows - 1) / kRows);
      if (dry != nullptr) {
        *dry = RowPlan{
            RowPath::kCached, kBlockThreads<S::threads>, S::threads, S::vecs, 1, grid, smem};
        return Status();
      }
      return std::apply(
          [&](auto... args) {
            return launch_rows(op, Follow::kDependent, kernel, grid, kBlockThreads<S::threads>,
                               smem, stream, 0, args...);
          },
          o.row_args());
    });
  }
  if (aligned && o.splits(cols)) {
    bool launched = false;
    if (Status s = o.split_rows(op, stream, dry, &launched); !s.ok() || launched) return s;
    const auto kernel_for = [](auto shape) {
      using S = decltype(shape);
      return Op::template cached<S::threads, S::vecs, true>();
    };
    if (Status s = std::apply(
            [&](auto... args) {
              return launch_if_split<T, Op::kWideSplit>(
                  op, rows, cols, &launched, Op::kRowsPerCluster, kernel_for, stream, dry, args...);
            },
            o.row_args());
        !s.ok() || launched)
      return s;
  }
  if constexpr (Op::kPipelined) {
    if (aligned) {
      bool launched = false;
      constexpr PipeShape kPipe = Op::kPipe;
      if (Status s = std::apply(
              [&](auto... args) {
                return launch_if_pipelined(op, Op::pipelined(), kPipe.vecs, kPipe.max_threads,
                                           kPipe.arrays, kPipe.blocks_per_sm, rows, cols, dtype,
                                           stream, &launched, dry, args...);
              },
              o.row_args());
          !s.ok() || launched)
        return s;
    }
  }
  typename Op::StreamedKernel kernel = nullptr;
  StreamedLaunch launch;
  if (Status s = o.streamed(op, aligned, &kernel, &launch); !s.ok()) return s;
  if (dry != nullptr) {
    *dry = RowPlan{RowPath::kStreamed, launch.threads, launch.threads, 0, 1,
                   grid_for(rows),     launch.smem};
    return Status();
  }
  return std::apply(
      [&](auto... args) {
        return launch_rows(op, Follow::kDependent, kernel, grid_for(rows), launch.threads,
                           launch.smem, stream, 0, args..., launch.smem > 0);
      },
      o.streamed_args());
}

/// The streamed rung as most ops take it: `kernel` sized by plan_streamed for `arrays` rows of
/// the op cached in shared memory.
template <typename T, typename Kernel>
Status plan_streamed_rung(const char* op, Kernel kernel, int arrays, int64_t cols, bool aligned,
                          StreamedLaunch* launch) {
  return plan_streamed(op, reinterpret_cast<const void*>(kernel), arrays, cols,
                       aligned ? kVec16<T> : 1, kDTypeOf<T>, launch);
}

}  // namespace cudaops::detail::rowwise
