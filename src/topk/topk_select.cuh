#pragma once

// Row-wise top-k (the algorithm: topk_kernels.cuh): its constants, the keys, the blocks' shared
// memory, the items and the bound of a tile's k-th key.
#include <cub/block/block_merge_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>

#include "core/dispatch.cuh"
#include "core/launch.h"
#include "core/launch_config.h"
#include "core/validate.h"
#include "cudaops/topk.h"
#include "device/cluster.cuh"
#include "device/numeric.cuh"
#include "device/vector.cuh"
#include "topk/topk_plan.h"

namespace cudaops::detail::topk {
namespace {

// Threads per value tile: 128 for tiles of at most kSmallTile values when k is at most kSmallK,
// where four warps have enough work and more blocks fit on an SM; 512 otherwise. Each thread
// holds kPerThread values.
constexpr int kWideThreads = 512;
constexpr int kNarrowThreads = 128;
constexpr int kSmallTile = 4096;
constexpr int kSmallK = 256;
constexpr int kPerThread = 32;
constexpr int kGatherThreads = 512;
// Items per thread that the sorts hold in registers, at most: value tiles have 64 registers,
// which the bucket sort's 4 fit and the merge sort's do not.
constexpr int kValueSortItems = 2;
constexpr int kValueBucketItems = 4;  // in wide blocks (they spill in narrow ones)
constexpr int kGatherSortItems = 8;
constexpr int kBins = 2048;            // 11-bit digits
constexpr uint32_t kBucketItems = 32;  // items of one bucket that bucket_sort ranks, at most
constexpr int kBoundBits = 16;         // bits the bound search resolves
constexpr int kGroupsPerKey = 4;       // group maxima per wanted key, at most 8 per thread
constexpr int kBoundBinBits = 8;       // bits of the bound found by one histogram pass
constexpr int kBoundBins = 1 << kBoundBinBits;
static_assert(kWideThreads * kPerThread == kValueTile, "a wide block holds a whole tile");
static_assert(kNarrowThreads * kPerThread == kSmallTile, "a narrow block holds a small tile");
// Rows of a few wide tiles (kClusterTile values each, at most kMaxRowCluster of them) that
// fit the device at once are selected in one launch: each tile by a block of kWideThreads
// threads holding kClusterKeys values each (one block per SM, 128 registers), the row's tiles
// together as a thread-block cluster.
constexpr int kClusterKeys = 64;
constexpr int kClusterTile = kWideThreads * kClusterKeys;
constexpr int kMaxRowCluster = 8;
constexpr uint32_t kRefineMaxima = 32;  // the bounds refine a bin holding more maxima
// The low bits of a key that are the same for every value of T: its float's bits beyond T's.
template <typename T>
constexpr int kKeyFloor = sizeof(T) == 4              ? 0
                          : std::is_same_v<T, __half> ? 13
                                                      : 16;

// ---- keys -------------------------------------------------------------------------------------

// The rank key of a value: unsigned order = rank order. NaN is above every number when looking
// for the largest (0xffffffff) and below every number when looking for the smallest (1); 0 is
// left to the sentinel of unused pair slots.
__device__ __forceinline__ uint32_t encode(float f, bool largest) {
  // Selects rather than branches: this runs once per element.
  const uint32_t bits = __float_as_uint(f);
  const uint32_t ordered =
      bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
  const uint32_t key = largest ? ordered : ~ordered;
  return f != f ? (largest ? 0xffffffffu : 1u) : key;
}

__device__ __forceinline__ float decode(uint32_t key, bool largest) {
  if (key == (largest ? 0xffffffffu : 1u)) return __uint_as_float(0x7fc00000u);
  const uint32_t ordered = largest ? key : ~key;
  const uint32_t bits = (ordered & 0x80000000u) != 0 ? (ordered & 0x7fffffffu) : ~ordered;
  return __uint_as_float(bits);
}

// ---- shared memory ----------------------------------------------------------------------------

template <int kThreads>
struct SelectShared {
  static constexpr int kWarps = kThreads / 32;
  alignas(16) uint32_t hist[kBins];  // (read in 16-byte vectors)
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan;
  uint32_t warp_gt[kWarps];
  uint32_t warp_eq[kWarps];
  uint32_t bins[kBoundBins];      // the bound search's histogram
  uint32_t spread[3][kWarps];     // per-warp largest and smallest maxima, non-empty groups
  uint32_t sample_min[2];         // per-warp least bound of a row's samples (at most 64)
  uint32_t shared_spread[3];      // a cluster's blocks: the block's spread, read by its peers
  uint32_t shared_total;          // ... the row's candidates, which every block adds to
  uint32_t shared_first;          // the block's first position among them
  uint32_t shared_gt, shared_eq;  // ... its keys above and at a threshold
  uint32_t bin;                   // the bin holding the k-th key
  uint32_t above;                 // keys in the bins above it
  uint32_t count;                 // keys in it
};

// The blocks that select one row together: a thread-block cluster (sm_90 and newer) whose block
// `rank` holds tile `rank` of the row; or one block alone (size 1), for which every step below
// is the block's own. Peers read each other's shared counts between cluster barriers, so that
// every block of the cluster makes the same choices.
struct RowCluster {
  int size = 1;
  int rank = 0;
  __device__ bool many() const { return size > 1; }
  // The sum of word p of every block (`before`: of the blocks of lower rank).
  __device__ uint32_t sum(uint32_t* p, bool before = false) const {
    const int end = before ? rank : size;
    uint32_t v = 0;
#pragma unroll
    for (int r = 0; r < kMaxRowCluster; ++r) {
      if (r < end) v += *cluster_peer(p, r);
    }
    return v;
  }
};

// What the selection found: a key is taken when (key >> shift) > prefix, or when it equals
// prefix and fewer than `need` equal keys come before it in column order.
struct Threshold {
  uint32_t prefix;
  int shift;  // 32: every key is "equal" (take the first `need`)
  uint32_t need;
};

__device__ __forceinline__ uint32_t high_bits(uint32_t key, int shift) {
  return shift >= 32 ? 0u : key >> shift;
}

/// Where bin `bin` of a swizzled histogram lies: groups of 4 bins keep their place within 128
/// bins XOR-ed by bits 7..9, so that bins 128 apart (the maxima of 16-bit rows, whose low key
/// bits are constant, fall that far apart) lie in different banks.
__device__ __forceinline__ int swizzled_bin(int bin) {
  return bin ^ (((bin >> 7) & 7) << 2);
}

// Finds the bin of hist (bins, in descending order of bins) where the count from the top
// reaches k_rem. Leaves it in shared.bin/above/count.
// With a cluster, the histogram is the sum of its blocks' (each complete in its block).
template <int kBinsNow, int kThreads, bool kSwizzled = false>
__device__ void find_bin(SelectShared<kThreads>& s, uint32_t k_rem, const RowCluster& c) {
  constexpr int kPer = kBinsNow / kThreads;
  static_assert(kPer >= 1 && kBinsNow % kThreads == 0, "bins per thread");
  const int t = threadIdx.x;
  if (c.many()) cluster_sync();  // every block's histogram is complete
  uint32_t counts[kPer];         // bins kBinsNow - 1 - (t * kPer + j)
  uint32_t local = 0;
  if constexpr (kPer % 4 == 0) {
    // The thread's bins are kPer/4 aligned groups of 4: read as 16-byte vectors (word reads
    // kPer words apart conflict kPer ways).
    const int base = kBinsNow - kPer * (t + 1);
#pragma unroll
    for (int q = 0; q < kPer / 4; ++q) {
      const int at = kSwizzled ? swizzled_bin(base + 4 * q) : base + 4 * q;
      uint4 v = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < kMaxRowCluster; ++r) {
        if (r < c.size) {
          const uint4 h = *reinterpret_cast<const uint4*>(c.many() ? cluster_peer(&s.hist[at], r)
                                                                   : &s.hist[at]);
          v = make_uint4(v.x + h.x, v.y + h.y, v.z + h.z, v.w + h.w);
        }
      }
      counts[kPer - 1 - 4 * q] = v.x;
      counts[kPer - 2 - 4 * q] = v.y;
      counts[kPer - 3 - 4 * q] = v.z;
      counts[kPer - 4 - 4 * q] = v.w;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      local += counts[j];
  } else {
    static_assert(!kSwizzled, "swizzled histograms are read in groups of 4");
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int bin = kBinsNow - 1 - (t * kPer + j);
      counts[j] = c.many() ? c.sum(&s.hist[bin]) : s.hist[bin];
      local += counts[j];
    }
  }
  uint32_t before = 0;
  cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(local, before);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (before < k_rem && before + counts[j] >= k_rem) {
      s.bin = static_cast<uint32_t>(kBinsNow - 1 - (t * kPer + j));
      s.above = before;
      s.count = counts[j];
    }
    before += counts[j];
  }
  __syncthreads();
}

// The radix selection of the k largest of keys[0, n), given the histogram of their top 11 bits
// in s.hist (already complete and visible to the block). With a cluster, of the k largest of
// all its blocks' keys. Keys whose kFloor low bits are constant (16-bit types: 13 or 16) are
// whole after the second pass: the third, over bits no key sets differently, is skipped.
template <int kThreads, int kFloor>
__device__ Threshold select_threshold(const uint32_t* keys, int n, uint32_t k,
                                      SelectShared<kThreads>& s, const RowCluster& c) {
  uint32_t k_rem = k;
  uint32_t prefix = 0;
  // Pass 0: bits 31..21.
  find_bin<kBins, kThreads>(s, k_rem, c);
  prefix = s.bin;
  k_rem -= s.above;
  if (s.count == k_rem) return {prefix, 21, k_rem};
    // Pass 1: bits 20..10, among keys with that prefix; pass 2: bits 9..0.
#pragma unroll 1
  for (int pass = 1; pass < 3; ++pass) {
    const int shift = pass == 1 ? 10 : 0;
    const int bits = pass == 1 ? 11 : 10;
    const int high_shift = shift + bits;
    // Everyone (with a cluster, every peer too) has read s.bin/above/count and the histogram.
    if (c.many()) {
      cluster_sync();
    } else {
      __syncthreads();
    }
    for (int i = threadIdx.x; i < (1 << bits); i += kThreads)
      s.hist[i] = 0;
    __syncthreads();
    const uint32_t mask = (1u << bits) - 1;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = keys[i];
      if ((key >> high_shift) == prefix) atomicAdd(&s.hist[(key >> shift) & mask], 1u);
    }
    __syncthreads();
    if (bits == 11) {
      find_bin<2048, kThreads>(s, k_rem, c);
    } else {
      find_bin<1024, kThreads>(s, k_rem, c);
    }
    prefix = (prefix << bits) | s.bin;
    k_rem -= s.above;
    if (s.count == k_rem || pass == 2 || kFloor >= shift) return {prefix, shift, k_rem};
  }
  return {prefix, 0, k_rem};  // not reached
}

// Calls emit(position, i) for every taken element i of keys[0, n), position being its rank
// among the taken ones in column (i) order (with a cluster, after those of lower ranks). Each
// warp walks its own contiguous segment.
template <int kThreads, typename Emit>
__device__ void compact(const uint32_t* keys, int n, Threshold th, SelectShared<kThreads>& s,
                        const RowCluster& c, Emit&& emit) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int segment = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int begin = warp * segment;
  const int end = min(n, begin + segment);
  // Counts of the warp's segment.
  uint32_t gt = 0, eq = 0;
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    const uint32_t v = i < end ? high_bits(keys[i], th.shift) : 0u;
    const bool valid = i < end;
    gt += __popc(__ballot_sync(0xffffffffu, valid && v > th.prefix));
    eq += __popc(__ballot_sync(0xffffffffu, valid && v == th.prefix));
  }
  if (lane == 0) {
    s.warp_gt[warp] = gt;
    s.warp_eq[warp] = eq;
  }
  __syncthreads();
  uint32_t gt_before = 0, eq_before = 0;
  if (c.many()) {
    if (threadIdx.x == 0) {
      uint32_t gt_all = 0, eq_all = 0;
      for (int w = 0; w < kWarps; ++w) {
        gt_all += s.warp_gt[w];
        eq_all += s.warp_eq[w];
      }
      s.shared_gt = gt_all;
      s.shared_eq = eq_all;
    }
    cluster_sync();
    gt_before = c.sum(&s.shared_gt, true);
    eq_before = c.sum(&s.shared_eq, true);
  }
  for (int w = 0; w < warp; ++w) {
    gt_before += s.warp_gt[w];
    eq_before += s.warp_eq[w];
  }
  const uint32_t below = (1u << lane) - 1u;
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    const bool valid = i < end;
    const uint32_t v = valid ? high_bits(keys[i], th.shift) : 0u;
    const bool is_gt = valid && v > th.prefix;
    const bool is_eq = valid && v == th.prefix;
    const uint32_t gt_mask = __ballot_sync(0xffffffffu, is_gt);
    const uint32_t eq_mask = __ballot_sync(0xffffffffu, is_eq);
    const uint32_t my_gt = gt_before + __popc(gt_mask & below);
    const uint32_t my_eq = eq_before + __popc(eq_mask & below);
    if (is_gt || (is_eq && my_eq < th.need)) emit(my_gt + min(my_eq, th.need), i);
    gt_before += __popc(gt_mask);
    eq_before += __popc(eq_mask);
  }
}

// ---- items ------------------------------------------------------------------------------------

__device__ __forceinline__ uint64_t make_item(uint32_t key, uint32_t column) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~column);
}
__device__ __forceinline__ uint32_t item_key(uint64_t item) {
  return static_cast<uint32_t>(item >> 32);
}
__device__ __forceinline__ uint32_t item_column(uint64_t item) {
  return ~static_cast<uint32_t>(item);
}

// The item's 32 leading bits of rank order: its key, and for keys of a 16-bit T, whose kFloor low
// bits are constant, the kFloor leading bits of ~column in their place: bits column_shift and up,
// where the row's columns are below 2^(column_shift + kFloor) (Out::column_shift). Equal keys,
// common in 16-bit rows, then differ by column, so that bounds and buckets of these words tell
// them apart. Never 0 (an empty group or slot).
template <int kFloor>
__device__ __forceinline__ uint32_t item_primary(uint64_t item, int column_shift) {
  if constexpr (kFloor == 0) {
    return item_key(item);
  } else {
    constexpr uint32_t kLow = (1u << kFloor) - 1u;
    const uint32_t column_bits = (static_cast<uint32_t>(item) >> column_shift) & kLow;
    return max((item_key(item) & ~kLow) | column_bits, 1u);
  }
}

__device__ __forceinline__ int pow2_at_least(int n) {
  return n <= 1 ? 1 : 1 << (32 - __clz(n - 1));
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, v);
#else
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
#endif
}

// "a is ordered before b": descending items, or (kByColumn) ascending columns, that is
// descending low words (~column). Item 0 is ordered after every other either way.
template <bool kByColumn>
struct Before {
  __device__ __forceinline__ bool operator()(uint64_t a, uint64_t b) const {
    return kByColumn ? static_cast<uint32_t>(a) > static_cast<uint32_t>(b) : a > b;
  }
};

// Sorts buf[0, m) (m a power of two) in descending order of the items (kByColumn: of their low
// words, ~column, so ascending columns), bitonically: one warp when m <= 256; else warp w owns
// the contiguous chunk [w * chunk, (w + 1) * chunk) of items, chunk >= 64, and does the
// compare-exchanges inside it, so the stages whose pairs stay in a chunk need only a warp
// barrier, and a block barrier is needed only around the others (for m = 2048 on 16 warps, 10
// of 66).
template <int kThreads, bool kByColumn>
__device__ void bitonic_sort_descending(uint64_t* buf, int m) {
  constexpr int kWarps = kThreads / 32;
  const int warps = m <= 256 ? 1 : min(kWarps, m / 64);  // warps at work
  const int chunk = m / warps;  // items per warp, a power of two >= 64 (or m, one warp)
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool working = warp < warps && m >= 2;
  const bool one_warp = warps == 1;
  if (one_warp && !working) return;      // nothing but warp barriers follow
  const int first = warp * (chunk / 2);  // the warp's first compare-exchange
  for (int size = 2; size <= m; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      if (working) {
        for (int c = lane; c < chunk / 2; c += 32) {
          const int i = first + c;
          const int lo = 2 * i - (i & (stride - 1));
          const int hi = lo + stride;
          const bool descending = (lo & size) == 0;
          const uint64_t a = buf[lo];
          const uint64_t b = buf[hi];
          if (Before<kByColumn>()(b, a) == descending) {
            buf[lo] = b;
            buf[hi] = a;
          }
        }
      }
      // The next stage: (size, stride / 2), or (2 * size, size) after stride 1.
      const int next = stride > 1 ? stride / 2 : size;
      if (one_warp || (2 * stride <= chunk && 2 * next <= chunk)) {
        __syncwarp();
      } else {
        __syncthreads();
      }
    }
  }
}

// ---- the bound ----------------------------------------------------------------------------------

// Groups of maxima per thread so that the block has kGroupsPerKey per wanted key (at most 8).
template <int kThreads>
__device__ __forceinline__ int groups_for(int k) {
  int groups = 1;
  while (groups < 8 && kThreads * groups < kGroupsPerKey * k)
    groups *= 2;
  return groups;
}

// Folds the 8 maxima m[] into the first `groups` (a power of two).
__device__ __forceinline__ void fold_maxima(uint32_t (&m)[8], int groups) {
#pragma unroll
  for (int width = 4; width >= 1; width /= 2) {
    if (groups <= width) {
#pragma unroll
      for (int g = 0; g < width; ++g)
        m[g] = max(m[2 * g], m[2 * g + 1]);
    }
  }
}

__device__ __forceinline__ uint32_t warp_max(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
#endif
}

__device__ __forceinline__ uint32_t warp_min(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_min_sync(0xffffffffu, v);
#else
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
#endif
}

// The block's largest `high`, smallest `low` and total `count` over its threads, to every
// thread (one block barrier).
template <int kThreads>
__device__ void block_spread(uint32_t& high, uint32_t& low, uint32_t& count,
                             SelectShared<kThreads>& s) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  high = warp_max(high);
  low = warp_min(low);
  count = warp_sum(count);
  if (lane == 0) {
    s.spread[0][warp] = high;
    s.spread[1][warp] = low;
    s.spread[2][warp] = count;
  }
  __syncthreads();
  high = warp_max(lane < kWarps ? s.spread[0][lane] : 0u);
  low = warp_min(lane < kWarps ? s.spread[1][lane] : 0xffffffffu);
  count = warp_sum(lane < kWarps ? s.spread[2][lane] : 0u);
}

// One pass of search_bound: of the maxima m[] whose bits above `high` are those of `found`, a
// histogram of the bits [shift, high], and the bin where the count from the top reaches k_rem.
// Returns found with that bin's bits; leaves the count above it in s.above.
template <int kThreads, int kGroups>
__device__ uint32_t bound_pass(const uint32_t (&m)[kGroups], uint32_t found, int high, int shift,
                               uint32_t k_rem, SelectShared<kThreads>& s) {
  const int lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < kBoundBins; i += kThreads)
    s.bins[i] = 0;
  __syncthreads();
  const uint32_t prefix = high_bits(found, high + 1);
  const uint32_t mask = (2u << (high - shift)) - 1u;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (m[g] != 0 && high_bits(m[g], high + 1) == prefix) {
      atomicAdd(&s.bins[(m[g] >> shift) & mask], 1u);
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    // Lane l holds bins 255 - 8l down to 248 - 8l; an exclusive scan from the top.
    constexpr int kPer = kBoundBins / 32;
    uint32_t c[kPer];
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      c[j] = s.bins[kBoundBins - 1 - (lane * kPer + j)];
      sum += c[j];
    }
    uint32_t before = sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, before, offset);
      if (lane >= offset) before += v;
    }
    before -= sum;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (before < k_rem && before + c[j] >= k_rem) {
        s.bin = static_cast<uint32_t>(kBoundBins - 1 - (lane * kPer + j));
        s.above = before;
        s.count = c[j];
      }
      before += c[j];
    }
  }
  __syncthreads();
  return found | (s.bin << shift);
}

// The search of find_bound: the bits top..bottom (at most 2 * kBoundBinBits) of the k-th largest
// of the non-empty maxima m[], one histogram pass per kBoundBinBits; then (kRefine) further
// passes, down to bit 0, while the bin of the k-th holds more than kRefineMaxima maxima (words
// tied in their leading bits, as the items of tied 16-bit keys are: each pass cuts the candidates
// that pass the bound).
template <int kThreads, int kGroups, bool kRefine>
__device__ uint32_t search_bound(const uint32_t (&m)[kGroups], uint32_t found, int top, int bottom,
                                 uint32_t k, SelectShared<kThreads>& s) {
  static_assert(kBoundBits <= 2 * kBoundBinBits, "two passes");
  const int shift = max(top - (kBoundBinBits - 1), bottom);
  found = bound_pass<kThreads, kGroups>(m, found, top, shift, k, s);
  uint32_t k_rem = k;
  if (shift > bottom) {
    k_rem -= s.above;
    __syncthreads();  // s.above is read before the next pass sets it
    found = bound_pass<kThreads, kGroups>(m, found, shift - 1, bottom, k_rem, s);
  }
  if constexpr (kRefine) {
    // s.count and s.above are the block's, read by every thread alike.
    for (int low = bottom; low > 0 && s.count > kRefineMaxima;) {
      k_rem -= s.above;
      __syncthreads();  // s.above and s.count are read before the next pass sets them
      const int next = max(low - kBoundBinBits, 0);
      found = bound_pass<kThreads, kGroups>(m, found, low - 1, next, k_rem, s);
      low = next;
    }
  }
  return max(found, 1u);
}

// The largest and the smallest non-empty maxima of the block's m[0, groups) (0: an empty group),
// and how many are non-empty, to every thread (block_spread).
template <int kThreads>
__device__ void maxima_spread(const uint32_t (&m)[8], int groups, uint32_t& high, uint32_t& low,
                              uint32_t& filled, SelectShared<kThreads>& s) {
  high = 0;
  low = 0xffffffffu;
  filled = 0;
#pragma unroll
  for (int g = 0; g < 8; ++g) {
    if (g < groups) {
      high = max(high, m[g]);
      if (m[g] != 0) low = min(low, m[g]);
      filled += m[g] != 0 ? 1u : 0u;
    }
  }
  block_spread(high, low, filled, s);
}

// A lower bound of the k-th key: the k-th largest of the block's maxima m[0, groups) (0: an
// empty group), to kBoundBits bits below the highest bit where the smallest and the largest
// non-empty maxima differ (so as fine as the maxima are spread, at every level), and (kRefine)
// finer where many maxima tie in those bits. 1 when fewer than k groups are non-empty. Every
// thread gets it.
template <int kThreads, bool kRefine>
__device__ uint32_t find_bound(const uint32_t (&m)[8], int groups, uint32_t k,
                               SelectShared<kThreads>& s) {
  uint32_t high, low, filled;
  maxima_spread(m, groups, high, low, filled, s);
  if (filled < k) return 1u;
  if (low == high) return low;
  const int top = 31 - __clz(low ^ high);
  uint32_t found = low & ~((2u << top) - 1u);  // the bits above `top`, common to all
  const int bottom = max(top - (kBoundBits - 1), 0);
  switch (groups) {
    case 1: {
      const uint32_t g[1] = {m[0]};
      return search_bound<kThreads, 1, kRefine>(g, found, top, bottom, k, s);
    }
    case 2: {
      const uint32_t g[2] = {m[0], m[1]};
      return search_bound<kThreads, 2, kRefine>(g, found, top, bottom, k, s);
    }
    case 4: {
      const uint32_t g[4] = {m[0], m[1], m[2], m[3]};
      return search_bound<kThreads, 4, kRefine>(g, found, top, bottom, k, s);
    }
    default:
      return search_bound<kThreads, 8, kRefine>(m, found, top, bottom, k, s);
  }
}

// find_bound for the blocks of a cluster, in one histogram pass: the k-th largest of all their
// maxima, binned by their distance below the largest (so the bins are as fine as the maxima are
// spread, even where that spread crosses an octave, as maxima of 16-bit rows just below a power of
// two do), 11 bits of it. s.hist is zeroed before (block_spread's barrier orders it). Every block
// finds the same bound. Keys of T (16-bit types) have constant bits below kKeyFloor<T>, which no
// refinement resolves.
template <int kThreads, typename T>
__device__ uint32_t cluster_bound(const uint32_t (&m)[8], int groups, uint32_t k,
                                  SelectShared<kThreads>& s, const RowCluster& c) {
  uint32_t high, low, filled;
  maxima_spread(m, groups, high, low, filled, s);
  if (threadIdx.x == 0) {
    s.shared_spread[0] = high;
    s.shared_spread[1] = low;
    s.shared_spread[2] = filled;
  }
  cluster_sync();
  filled = c.sum(&s.shared_spread[2]);
#pragma unroll
  for (int r = 0; r < kMaxRowCluster; ++r) {
    if (r < c.size) {
      const uint32_t* peer = cluster_peer(s.shared_spread, r);
      high = max(high, peer[0]);
      low = min(low, peer[1]);
    }
  }
  if (filled < k) return 1u;
  if (low == high) return low;
  // Bin kBins - 1 - d holds the maxima whose distance below high, shifted, is d.
  const int top = 31 - __clz(high - low);
  const int shift = max(top - 10, 0);
#pragma unroll
  for (int g = 0; g < 8; ++g) {
    if (g < groups && m[g] != 0) {
      atomicAdd(&s.hist[swizzled_bin(kBins - 1 - static_cast<int>((high - m[g]) >> shift))], 1u);
    }
  }
  if (!c.many()) __syncthreads();  // (find_bin waits for the whole cluster)
  find_bin<kBins, kThreads, true>(s, k, c);
  uint32_t d = kBins - 1 - s.bin;  // the k-th's distance below high, >> shift
  int d_shift = shift;
  // A bin that holds many maxima (tied, or spread over orders of magnitude) is refined by the
  // next 11 bits of the distance, so that few keys pass the bound needlessly.
  if (shift > kKeyFloor<T> && s.count > kRefineMaxima) {
    const uint32_t k_rem = k - s.above;
    const int low_shift = max(shift - 11, 0);
    const uint32_t low_mask = (1u << (shift - low_shift)) - 1u;
    cluster_sync();  // every block (and every peer) has read the histogram
    for (int i = threadIdx.x; i < kBins; i += kThreads)
      s.hist[i] = 0;
    __syncthreads();
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      if (g < groups && m[g] != 0 && ((high - m[g]) >> shift) == d) {
        atomicAdd(&s.hist[swizzled_bin(
                      static_cast<int>(low_mask - (((high - m[g]) >> low_shift) & low_mask)))],
                  1u);
      }
    }
    if (!c.many()) __syncthreads();
    find_bin<kBins, kThreads, true>(s, k_rem, c);
    d = (d << (shift - low_shift)) | (low_mask - s.bin);
    d_shift = low_shift;
  }
  // The smallest key at distance d: at least k maxima are at or above it.
  const uint64_t below = (static_cast<uint64_t>(d) + 1u) << d_shift;
  return max(static_cast<uint32_t>(high + 1u - min(below, static_cast<uint64_t>(high) + 1u)),
             max(low, 1u));
}

}  // namespace
}  // namespace cudaops::detail::topk
