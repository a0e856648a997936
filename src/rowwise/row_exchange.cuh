#pragma once

// Rows split over a thread-block cluster, with one-way reductions (sm_90 and newer). Each block of
// a cluster holds one part of a row; a reduction over the row sends every warp's value to every
// block of the cluster (an asynchronous store into the peer's shared memory that completes on the
// peer's mbarrier) and waits only for the values sent to its own block. No block waits for another
// to reach a barrier, and no block barrier is taken: each warp sends its own value. Every block
// then adds the same values in the same order, so all of a row's blocks compute the same bits.
#include <cstdint>

#include "device/cluster.cuh"
#include "rowwise/row_common.cuh"
#include "rowwise/row_pipeline.cuh"

namespace cudaops::detail::rowwise {

/// Values one reduction gathers per block: warps per block times blocks per cluster, at most.
inline constexpr int kExchangeSlots = 64;
/// The slots of the split blocks of kThreads threads: 16 blocks of 128 threads or 8 of 256 fill
/// kExchangeSlots; 16 blocks of 256 or 512 threads (rows too long for those) need more.
template <int kThreads, bool kSplit>
inline constexpr int kExchangeSlotsFor = (kSplit && kThreads > 128)
                                             ? kMaxNonPortableSplit*(kThreads / kWarp)
                                             : kExchangeSlots;

/// The shared::cluster address of the shared-memory location `local` (a shared::cta address) in
/// block `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_address(uint32_t local, unsigned rank) {
#if CUDAOPS_HAS_CLUSTERS
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
#else
  (void)rank;
  return local;
#endif
}

/// Stores v at `remote` (a shared::cluster address) and counts its 4 bytes on the mbarrier at
/// `remote_bar` (in the same block as `remote`).
__device__ __forceinline__ void store_async(uint32_t remote, float v, uint32_t remote_bar) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n" ::"r"(remote),
      "f"(v), "r"(remote_bar)
      : "memory");
#else
  (void)remote;
  (void)v;
  (void)remote_bar;
  __trap();  // split kernels are only launched where they were built for sm_90 or newer
#endif
}

/// The exchange of R reductions per row, each of W floats, in a block of a cluster whose blocks
/// share each row, for at most kSlots warps in all (warps per block times blocks). The slots and
/// mbarriers come in two sets, used by alternate rows: a peer may send its values for the next row
/// while this block still reads the current row's; it cannot send the row after that before it has
/// had this block's values for the next row, which every warp sends after reading the current
/// row's.
template <int R, int W = 1, int kSlots = kExchangeSlots>
struct RowExchange {
  float slots[2][R][W][kSlots];
  uint64_t bars[2][R];

  /// Every thread, before the first row: initialises the mbarriers, each expecting the values of
  /// every warp of the `parts` blocks, and arrives on the cluster barrier that the first
  /// reduction waits on.
  __device__ __forceinline__ void begin(int parts) {
    const int senders = static_cast<int>(blockDim.x) / kWarp * parts;
    if (threadIdx.x == 0) {
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int r = 0; r < R; ++r)
          mbarrier_init(&bars[b][r], 1);
      }
      mbarrier_init_fence();
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int r = 0; r < R; ++r)
          mbarrier_arrive_expect(&bars[b][r], senders * W * sizeof(float));
      }
    }
    cluster_arrive_relaxed();
  }

  /// Reduction r of the block's i-th row (i = 0, 1, ...) over the blocks of the cluster: v is
  /// this thread's values on entry and the row's on return, in every thread of every block.
  template <class Op>
  __device__ __forceinline__ void allreduce(int r, int i, float (&v)[W], int rank, int parts,
                                            Op op) {
    warp_allreduce(v, op);
    gather(r, i, v, rank, parts, [&](const float(&got)[W][kSlots], int senders) {
      const int lane = threadIdx.x % kWarp;
#pragma unroll
      for (int w = 0; w < W; ++w) {
        v[w] = Op::kIdentity;
        for (int s = lane; s < senders; s += kWarp)
          v[w] = op(v[w], got[w][s]);
      }
      warp_allreduce(v, op);
    });
  }

  /// Exchange r of the block's i-th row: every warp's values v (the same in each of its lanes)
  /// reach every block of the cluster, and read(got, senders) is called once they have all
  /// arrived: got[w][s] is value w of sender s, the warp s % (blockDim.x / 32) of the block of
  /// rank s / (blockDim.x / 32), for s < senders.
  ///
  /// Where a block holds parts of several rows, its threads in groups of kGroupWarps warps, group
  /// g holding a part of row g, the senders of each row are together: those of group g are
  /// g * kGroupWarps * parts onwards, sender s of them the warp s % kGroupWarps of the group in the
  /// block of rank s / kGroupWarps. 0: the block is one group.
  template <int kGroupWarps = 0, class Read>
  __device__ __forceinline__ void gather(int r, int i, const float (&v)[W], int rank, int parts,
                                         Read&& read) {
    const int lane = threadIdx.x % kWarp;
    const int warps = static_cast<int>(blockDim.x) / kWarp;
    const int set = i & 1;
    // The peers' mbarriers are initialised (once, before the first value is sent).
    if (i == 0 && r == 0) cluster_wait();
    if (lane < parts) {
      const int warp = static_cast<int>(threadIdx.x) / kWarp;
      int slot = rank * warps + warp;
      if constexpr (kGroupWarps > 0) {
        slot = (warp / kGroupWarps) * kGroupWarps * parts + rank * kGroupWarps + warp % kGroupWarps;
      }
      const uint32_t bar = peer_address(shared_address(&bars[set][r]), lane);
#pragma unroll
      for (int w = 0; w < W; ++w)
        store_async(peer_address(shared_address(&slots[set][r][w][slot]), lane), v[w], bar);
    }
    const int senders = warps * parts;
    mbarrier_wait(&bars[set][r], static_cast<uint32_t>((i >> 1) & 1));
    read(slots[set][r], senders);
    // Armed again for the row two further on; its values cannot arrive before every warp of
    // this block has sent its values for the next row, so after every warp has read these.
    if (threadIdx.x == 0) mbarrier_arrive_expect(&bars[set][r], senders * W * sizeof(float));
  }
};

/// The row-wide reductions of a cached-shape kernel, R per row of W floats each: over the row's
/// threads (row_allreduce, through `scratch` of W * 32 floats), or, split, over the blocks of the
/// cluster too (RowExchange). The k-th call of a row is its reduction k.
template <int kThreads, bool kSplit, int R, int W = 1>
struct RowReducer {
  /// The exchange a kernel declares in shared memory for this reducer.
  using Exchange = RowExchange<R, W, kExchangeSlotsFor<kThreads, kSplit>>;
  float* scratch;
  Exchange* exchange;
  int rank;
  int parts;
  int i = 0;  // the block's row count so far
  int r = 0;  // reductions so far in this row

  template <class Op>
  __device__ __forceinline__ void operator()(float (&v)[W], Op op) {
    if constexpr (kSplit) {
      exchange->allreduce(r++, i, v, rank, parts, op);
    } else {
      row_allreduce<kThreads>(v, scratch, op);
    }
  }
  /// The mean and the sum of squared deviations (M2) of a row, from each warp's sum, mean and M2
  /// about its mean (warp_sum, warp_mean and warp_m2, the same in each of the warp's lanes): one
  /// exchange (or one block barrier) where two reductions, the sum and then the squares about the
  /// mean, would take two. count is the row's length and inv_count 1 / cols; warp_count(c, w) the
  /// elements of a part of c columns held by warp w of its block (the part of the block of rank k
  /// holding min(cols - k * part_cols, part_cols) of them). The split rows exchange the means
  /// (combine_split_moments), whole-block rows the sums (combine_moments). Needs W == 2 and, for
  /// whole-block rows, kMomentsScratch floats of scratch.
  template <class WarpCount>
  __device__ __forceinline__ Moments moments(float warp_sum, float warp_mean, float warp_m2,
                                             int cols, int part_cols, float inv_count,
                                             WarpCount warp_count) {
    static_assert(W == 2, "moments exchange two values per warp");
    const float count = static_cast<float>(cols);
    const int warps = kThreads / kWarp;
    Moments m;
    if constexpr (kSplit) {
      (void)warp_sum;
      const float v[2] = {warp_mean, warp_m2};
      exchange->gather(r++, i, v, rank, parts,
                       [&](const float(&got)[2][kExchangeSlotsFor<kThreads, kSplit>], int senders) {
                         m = combine_split_moments<kExchangeSlotsFor<kThreads, kSplit>>(
                             got[0], got[1], senders, count, inv_count, [&](int s) {
                               const int k = s / warps;
                               return warp_count(min(cols - k * part_cols, part_cols), s % warps);
                             });
                       });
    } else if constexpr (kThreads == kWarp) {
      (void)warp_mean;
      (void)inv_count;
      m = {warp_sum / count, warp_m2};
    } else {
      (void)warp_mean;
      (void)inv_count;
      // Two sets of slots, used by alternate rows: a set is written again two rows later, after
      // every thread has read it and passed the barrier of the row in between.
      float* slots = scratch + (i & 1) * 2 * kWarp;
      const int warp = static_cast<int>(threadIdx.x) / kWarp;
      if (threadIdx.x % kWarp == 0) {
        slots[warp] = warp_sum;
        slots[kWarp + warp] = warp_m2;
      }
      __syncthreads();
      m = combine_moments(slots, slots + kWarp, warps, count,
                          [&](int w) { return warp_count(cols, w); });
    }
    return m;
  }
  /// Moves on to the block's next row.
  __device__ __forceinline__ void next_row() {
    ++i;
    r = 0;
  }
};

}  // namespace cudaops::detail::rowwise

// ---------------------------------------------------------------------------------------------
// Host.
#include <algorithm>

namespace cudaops::detail::rowwise {

/// Sets *clusters to the clusters of `parts` blocks of `threads` threads of `kernel` (with `smem`
/// bytes of dynamic shared memory each) that fit the device at once. A failed query's error is
/// cleared and returned.
template <typename... Params>
cudaError_t max_active_clusters(void (*kernel)(Params...), int parts, int threads, int* clusters,
                                size_t smem = 0) {
  const LaunchConfig one(static_cast<unsigned>(parts), threads, smem, nullptr, parts);
  const cudaError_t error = cudaOccupancyMaxActiveClusters(clusters, kernel, &one.config());
  if (error != cudaSuccess) (void)cudaGetLastError();
  return error;
}

/// Forward rows longer than this many bytes may be split (shorter ones have cached kernels, or
/// streamed ones that measured as fast).
inline constexpr int64_t kSplitFromBytes = 32 * 1024;

/// Launches a split forward kernel over rows x cols of T in clusters of the blocks a row needs,
/// when its rows split (split_parts); *launched says whether it did. Each cluster takes
/// rows_per_cluster rows (the last ones fewer), one after another. kernel_for(CachedShape<threads,
/// vecs>{}) gives the kernel of a shape: blocks of 128 threads of 4 vectors where a row needs at
/// most kMaxSplit of them (faster than 256 threads or the pipelined kernel), else of 256 threads.
/// Rows too long for 8 blocks of 256 take up to kMaxNonPortableSplit of them, then (but with
/// kWide) of 512 threads, where the device allows such clusters: 16-bit rows of up to 262144
/// columns, faster than the pipelined or streamed kernels. With kWide (the layer norm), rows that
/// need up to kMaxNonPortableSplit blocks of 128 threads take them where the device allows such
/// clusters, before blocks of 256; and its rows stay whole rather than take blocks of 512
/// threads, which were slower (with no room in static shared memory to hold the parameters, they
/// would fetch them from L2 for every row). The numbers are in docs/tuning/rowwise.md.
/// With `dry` not null nothing is launched: *dry says what would be.
template <typename T, bool kWide, class KernelFor, typename... Args>
Status launch_if_split(const char* op, int64_t rows, int64_t cols, bool* launched,
                       int rows_per_cluster, KernelFor&& kernel_for, cudaStream_t stream,
                       RowPlan* dry, Args... args) {
  static_assert(kMaxNonPortableSplit * (128 / kWarp) <= kExchangeSlotsFor<128, true> &&
                    kMaxNonPortableSplit * (256 / kWarp) <= kExchangeSlotsFor<256, true> &&
                    kMaxNonPortableSplit * (512 / kWarp) <= kExchangeSlotsFor<512, true>,
                "exchange slots");
  *launched = false;
  const auto launch = [&](auto shape, int max_parts) -> Status {
    using S = decltype(shape);
    constexpr int64_t kPartCols = int64_t{S::threads} * S::vecs * kVec16<T>;
    const auto kernel = kernel_for(shape);
    int parts = 0;
    if (Status s = split_parts(op, reinterpret_cast<const void*>(kernel), cols, kPartCols, &parts,
                               max_parts);
        !s.ok() || parts == 0)
      return s;
    if (parts > kMaxSplit) {
      // A non-portable cluster size: launched only where one such cluster fits.
      int active = 0;
      if (max_active_clusters(kernel, parts, S::threads, &active) != cudaSuccess || active < 1)
        return Status();
    }
    // A grid that cannot hold every row's cluster walks them (gridDim.x < 2^31).
    const int64_t clusters = std::min<int64_t>((rows + rows_per_cluster - 1) / rows_per_cluster,
                                               (int64_t{1} << 30) / parts);
    *launched = true;
    if (dry != nullptr) {
      *dry = RowPlan{RowPath::kSplit,
                     S::threads,
                     S::threads,
                     S::vecs,
                     parts,
                     static_cast<unsigned>(clusters * parts),
                     0};
      return Status();
    }
    return launch_split(op, Follow::kDependent, kernel, static_cast<unsigned>(clusters), parts,
                        S::threads, stream, args...);
  };
  if (cols <= kMaxSplit * int64_t{128} * 4 * kVec16<T>)
    return launch(CachedShape<128, 4>{}, kMaxSplit);
  if constexpr (kWide) {
    if (Status s = launch(CachedShape<128, 4>{}, kMaxNonPortableSplit); !s.ok() || *launched)
      return s;
  }
  if (Status s = launch(CachedShape<256, 4>{}, kMaxSplit); !s.ok() || *launched) return s;
  if (Status s = launch(CachedShape<256, 4>{}, kMaxNonPortableSplit); !s.ok() || *launched)
    return s;
  if constexpr (kWide) {
    return Status();
  } else {
    return launch(CachedShape<512, 4>{}, kMaxNonPortableSplit);
  }
}

}  // namespace cudaops::detail::rowwise
