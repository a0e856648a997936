// Row-wise top-k: the kernels and their launches, included by one translation unit per dtype
// (topk_<dtype>.cu).
//
// Every element becomes a 32-bit key whose unsigned order is the rank order (for the k largest,
// the order of the values; for the k smallest, its reverse), and an item (key << 32 | ~column)
// whose descending order is the rank order with ties to the lower column; so every case is "the
// k largest items", and item 0 (below every element) pads.
//
// A block selects from a tile: values of a row (level 0: at most kValueTile, 32 per thread,
// held in registers) or the items that tiles of the previous level left (later levels, in
// shared memory).
//   1. A lower bound of the tile's k-th key: the maxima of disjoint groups of elements are
//      elements, so the k-th largest of the block's group maxima leaves at least k keys at or
//      above it. With four groups per wanted key, about 1.15 k keys of random data pass. The
//      bound is found 16 bits below the highest bit where the maxima differ, by two 8-bit
//      histogram passes. Rows of many tiles are sampled first (topk_plan.h): the least of a
//      few tiles' bounds is the row's, and a tile that finds few enough keys above it skips
//      its own.
//   2. The keys at or above the bound are the tile's candidates. A tile that is not its row's
//      last leaves them (at most slot_items(k), in any order) for the next level; the last sorts
//      them (sort_items: by buckets of the keys where they are spread, else a merge sort) and
//      writes the first k (unsorted results: re-sorted by column). A gathering block whose
//      slots hold more than its shared memory takes them in chunks.
//   3. When too many pass (ties, adversarial data), a value tile goes to shared memory and is
//      selected exactly by radix selection (11-bit digits, 3 passes at most) and compacted in
//      column order; a tile of items is sorted whole.
// Rows of 2 to 8 tiles (of up to 32768 values, 64 per thread) that the device holds at once are
// selected in one launch by a thread-block cluster per row (sm_90 and newer): the blocks find
// one bound for the row from all their maxima (cluster_bound), leave their candidates in block
// 0's shared memory, which sorts them, and fall back together to the radix selection, their
// histograms and column order merged through distributed shared memory. Where a row takes
// several launches, each after the first may start early and waits for its inputs.
#include <cub/block/block_merge_sort.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>

#include "core/cluster.cuh"
#include "core/dispatch.cuh"
#include "core/kernel_families.h"
#include "core/launch.h"
#include "core/launch_config.h"
#include "core/numeric.cuh"
#include "core/validate.h"
#include "core/vector.cuh"
#include "cudaops/topk.h"
#include "topk/topk_plan.h"

namespace cudaops {
namespace detail::topk {
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
constexpr uint32_t kRefineMaxima = 32;  // cluster_bound refines a bin holding more maxima
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
  uint32_t hist[kBins];
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

// Finds the bin of hist (bins, in descending order of bins) where the count from the top
// reaches k_rem. Leaves it in shared.bin/above/count.
// With a cluster, the histogram is the sum of its blocks' (each complete in its block).
template <int kBinsNow, int kThreads>
__device__ void find_bin(SelectShared<kThreads>& s, uint32_t k_rem, const RowCluster& c) {
  constexpr int kPer = kBinsNow / kThreads;
  static_assert(kPer >= 1 && kBinsNow % kThreads == 0, "bins per thread");
  const int t = threadIdx.x;
  if (c.many()) cluster_sync();  // every block's histogram is complete
  uint32_t counts[kPer];
  uint32_t local = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int bin = kBinsNow - 1 - (t * kPer + j);
    counts[j] = c.many() ? c.sum(&s.hist[bin]) : s.hist[bin];
    local += counts[j];
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
// all its blocks' keys.
template <int kThreads>
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
    if (s.count == k_rem || pass == 2) return {prefix, shift, k_rem};
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
      }
      before += c[j];
    }
  }
  __syncthreads();
  return found | (s.bin << shift);
}

// The search of find_bound: the bits top..bottom (at most 2 * kBoundBinBits) of the k-th largest
// of the non-empty maxima m[], one histogram pass per kBoundBinBits.
template <int kThreads, int kGroups>
__device__ uint32_t search_bound(const uint32_t (&m)[kGroups], uint32_t found, int top, int bottom,
                                 uint32_t k, SelectShared<kThreads>& s) {
  static_assert(kBoundBits <= 2 * kBoundBinBits, "two passes");
  const int shift = max(top - (kBoundBinBits - 1), bottom);
  found = bound_pass<kThreads, kGroups>(m, found, top, shift, k, s);
  if (shift > bottom) {
    const uint32_t k_rem = k - s.above;
    __syncthreads();  // s.above is read before the next pass sets it
    found = bound_pass<kThreads, kGroups>(m, found, shift - 1, bottom, k_rem, s);
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
// non-empty maxima differ (so as fine as the maxima are spread, at every level). 1 when fewer
// than k groups are non-empty. Every thread gets it.
template <int kThreads>
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
      return search_bound<kThreads, 1>(g, found, top, bottom, k, s);
    }
    case 2: {
      const uint32_t g[2] = {m[0], m[1]};
      return search_bound<kThreads, 2>(g, found, top, bottom, k, s);
    }
    case 4: {
      const uint32_t g[4] = {m[0], m[1], m[2], m[3]};
      return search_bound<kThreads, 4>(g, found, top, bottom, k, s);
    }
    default:
      return search_bound<kThreads, 8>(m, found, top, bottom, k, s);
  }
}

// find_bound for the blocks of a cluster, in one histogram pass: the k-th largest of all their
// maxima, to 11 bits below the highest bit where the smallest and the largest of them differ.
// s.hist is zeroed before (block_spread's barrier orders it). Every block finds the same bound.
// Keys of T (16-bit types) have constant bits below kKeyFloor<T>, which no refinement resolves.
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
  const int top = 31 - __clz(low ^ high);
  const int shift = max(top - 10, 0);
  const uint32_t prefix = high_bits(low, top + 1);
  const uint32_t mask = (2u << (top - shift)) - 1u;
#pragma unroll
  for (int g = 0; g < 8; ++g) {
    if (g < groups && m[g] != 0 && high_bits(m[g], top + 1) == prefix) {
      atomicAdd(&s.hist[(m[g] >> shift) & mask], 1u);
    }
  }
  if (!c.many()) __syncthreads();  // (find_bin waits for the whole cluster)
  find_bin<kBins, kThreads>(s, k, c);
  uint32_t bound = (top >= 31 ? 0u : prefix << (top + 1)) | (s.bin << shift);
  // A bin that holds many maxima (they are spread over orders of magnitude, or tied) is
  // refined by the next 11 bits, so that few keys pass the bound needlessly.
  if (shift > kKeyFloor<T> && s.count > kRefineMaxima) {
    const uint32_t k_rem = k - s.above;
    const uint32_t bin = bound >> shift;
    const int low_shift = max(shift - 11, 0);
    const uint32_t low_mask = (1u << (shift - low_shift)) - 1u;
    cluster_sync();  // every block (and every peer) has read the histogram
    for (int i = threadIdx.x; i < kBins; i += kThreads)
      s.hist[i] = 0;
    __syncthreads();
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      if (g < groups && m[g] != 0 && (m[g] >> shift) == bin) {
        atomicAdd(&s.hist[(m[g] >> low_shift) & low_mask], 1u);
      }
    }
    if (!c.many()) __syncthreads();
    find_bin<kBins, kThreads>(s, k_rem, c);
    bound = (bin << shift) | (s.bin << low_shift);
  }
  return max(bound, 1u);
}

// ---- results ----------------------------------------------------------------------------------

// Where a level's results go: slots of items (and their counts) for the next level, or the
// caller's values and indices.
template <typename T>
struct Out {
  uint64_t* items = nullptr;   // slot l (= row * tiles + tile) at items + l * slot
  uint32_t* counts = nullptr;  // its item count at counts[l]
  int slot = 0;
  T* values = nullptr;
  int64_t values_stride = 0;
  void* indices = nullptr;
  int64_t indices_stride = 0;
  bool index64 = true;
  bool sorted = true;
  bool largest = true;
};

// Pads buf[count, pow2(count)) with item 0 (which sorts last either way) and sorts it
// bitonically. Starts after a block barrier and ends with one.
template <int kThreads, bool kByColumn>
__device__ void pad_and_sort(uint64_t* buf, int count) {
  const int size = pow2_at_least(count);
  for (int i = count + threadIdx.x; i < size; i += kThreads)
    buf[i] = 0;
  __syncthreads();
  bitonic_sort_descending<kThreads, kByColumn>(buf, size);
  __syncthreads();
}

// A merge sort of buf[0, count) through registers, kItems per thread (count <= kThreads *
// kItems), with buf[0, kThreads * kItems] (one more item) as its shared storage.
template <int kThreads, int kItems, bool kByColumn>
__device__ void merge_sort(uint64_t* buf, int count) {
  using Sort = cub::BlockMergeSort<uint64_t, kThreads, kItems>;
  static_assert(sizeof(typename Sort::TempStorage) <= (kThreads * kItems + 1) * sizeof(uint64_t),
                "the sort's storage fits in the buffer");
  uint64_t items[kItems];
  __syncthreads();  // buf is written
  // Any placement sorts; striped loads keep the banks apart. Padding with item 0 sorts last.
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    items[j] = i < count ? buf[i] : 0u;
  }
  __syncthreads();
  Sort(*reinterpret_cast<typename Sort::TempStorage*>(buf)).Sort(items, Before<kByColumn>());
  __syncthreads();
  const int first = static_cast<int>(threadIdx.x) * kItems;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (first + j < count) buf[first + j] = items[j];
  }
  __syncthreads();
}

// A counting sort of buf[0, count) (at most kItems per thread) by buckets of the primary word
// (the key, or kByColumn the low word), then by comparison inside each bucket: a few barriers
// and no merge rounds. The buckets are 4 * kThreads equal ranges of the block's span of primary
// words, so that spread data leave at most about one item in each. Sorts nothing and
// returns false when a bucket would hold more than kBucketItems (ties, clustered data). Needs
// no barrier after the writes of buf; ends with a block barrier.
template <int kThreads, int kItems, bool kByColumn>
__device__ bool bucket_sort(uint64_t* buf, int count, SelectShared<kThreads>& s) {
  constexpr int kPer = 4;  // buckets per thread
  constexpr int kBuckets = kPer * kThreads;
  constexpr int kBucketBits = kThreads == 512 ? 11 : kThreads == 256 ? 10 : 9;
  static_assert(kBuckets == 1 << kBucketBits && kBuckets <= kBins, "buckets in s.hist");
  const int t = static_cast<int>(threadIdx.x);
  const Before<kByColumn> before;
  auto primary = [](uint64_t item) {
    return kByColumn ? static_cast<uint32_t>(item) : static_cast<uint32_t>(item >> 32);
  };
  __syncthreads();  // buf is written
  uint64_t item[kItems];
  uint32_t high = 0, low = 0xffffffffu;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + t;
    item[j] = i < count ? buf[i] : 0u;
    if (i < count) {
      high = max(high, primary(item[j]));
      low = min(low, primary(item[j]));
    }
  }
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    s.hist[q * kThreads + t] = 0;
  uint32_t unused = 0;
  block_spread(high, low, unused, s);  // its barrier also orders the zeroed buckets
  const uint32_t span = high - low;
  const int shift = max(32 - __clz(span) - kBucketBits, 0);  // span >> shift < kBuckets
  uint32_t place[kItems];                                    // the bucket, then the position
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) place[j] = (high - primary(item[j])) >> shift;
  }
  uint32_t slot[kItems];  // the arrival order in the bucket
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) slot[j] = atomicAdd(&s.hist[place[j]], 1u);
  }
  __syncthreads();
  // Bucket offsets: an exclusive scan of the counts, in place.
  uint32_t c[kPer];
  uint32_t sum = 0, most = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    c[q] = s.hist[t * kPer + q];
    sum += c[q];
    most = max(most, c[q]);
  }
  uint32_t offset = 0;
  cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(sum, offset);
  if (__syncthreads_or(most > kBucketItems)) return false;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    s.hist[t * kPer + q] = offset;
    offset += c[q];
  }
  __syncthreads();
  // Each item to its bucket, in arrival order; then its rank among the bucket's.
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) buf[s.hist[place[j]] + slot[j]] = item[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) {
      const uint32_t first = s.hist[place[j]];
      const uint32_t end =
          place[j] + 1 < kBuckets ? s.hist[place[j] + 1] : static_cast<uint32_t>(count);
      uint32_t rank = 0;
      for (uint32_t i = first; i < end; ++i)
        rank += before(buf[i], item[j]) ? 1u : 0u;
      place[j] = first + rank;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) buf[place[j]] = item[j];
  }
  __syncthreads();
  return true;
}

// bucket_sort, else (kMerge) a merge sort, else a bitonic sort.
template <int kThreads, int kItems, bool kByColumn, bool kMerge>
__device__ void bucket_or_merge_sort(uint64_t* buf, int count, SelectShared<kThreads>& s) {
  if (bucket_sort<kThreads, kItems, kByColumn>(buf, count, s)) return;
  if (kMerge && count > 256) {
    merge_sort<kThreads, kItems, kByColumn>(buf, count);
  } else {
    pad_and_sort<kThreads, kByColumn>(buf, count);
  }
}

// Sorts buf[0, count) in descending order (kByColumn: in ascending columns). Up to
// kBucketSortItems per thread, by buckets where the data are spread (bucket_sort); else, up to
// kMaxItems per thread, a merge sort through registers, or for at most 256 items a bitonic sort
// in one warp. Otherwise a bitonic sort of the whole block. The two limits bound the registers
// the sorts take (the merge sort's are the more). buf holds max(pow2(count), kThreads) + 1
// items. Needs no barrier after the writes of buf; ends with a block barrier.
template <int kThreads, int kMaxItems, bool kByColumn, int kBucketSortItems = kMaxItems>
__device__ void sort_items(uint64_t* buf, int count, SelectShared<kThreads>& s) {
  static_assert(kBucketSortItems >= kMaxItems && kBucketSortItems <= 8, "bucket limits");
  if (count <= 1) {
    __syncthreads();
    return;
  }
  if (count <= kThreads) {
    bucket_or_merge_sort<kThreads, 1, kByColumn, true>(buf, count, s);
  } else if (kBucketSortItems >= 2 && count <= 2 * kThreads) {
    bucket_or_merge_sort<kThreads, 2, kByColumn, (kMaxItems >= 2)>(buf, count, s);
  } else if (kBucketSortItems >= 4 && count <= 4 * kThreads) {
    bucket_or_merge_sort<kThreads, 4, kByColumn, (kMaxItems >= 4)>(buf, count, s);
  } else if (kBucketSortItems >= 8 && count <= 8 * kThreads) {
    bucket_or_merge_sort<kThreads, 8, kByColumn, (kMaxItems >= 8)>(buf, count, s);
  } else {
    __syncthreads();
    pad_and_sort<kThreads, kByColumn>(buf, count);
  }
}

// Writes best[0, k) (in descending order) to row `row` of the values and indices; unsorted
// results are first re-sorted by column (best must hold pow2(k) items). Starts after a block
// barrier.
template <typename T, int kThreads, int kMaxItems, int kBucketSortItems = kMaxItems>
__device__ void write_final(uint64_t* best, int k, const Out<T>& out, int64_t row,
                            SelectShared<kThreads>& s) {
  if (!out.sorted) sort_items<kThreads, kMaxItems, true, kBucketSortItems>(best, k, s);
  T* values = out.values + row * out.values_stride;
  for (int i = threadIdx.x; i < k; i += kThreads) {
    const uint64_t item = best[i];
    values[i] = from_float<T>(decode(item_key(item), out.largest));
    const uint32_t column = item_column(item);
    if (out.index64) {
      static_cast<int64_t*>(out.indices)[row * out.indices_stride + i] = column;
    } else {
      static_cast<int32_t*>(out.indices)[row * out.indices_stride + i] =
          static_cast<int32_t>(column);
    }
  }
}

// Sorts the `count` items of buf (which holds pow2(count)) and writes the first k as the row's
// result. Starts after a block barrier.
template <typename T, int kThreads, int kMaxItems, int kBucketSortItems = kMaxItems>
__device__ void sort_and_write_final(uint64_t* buf, int count, int k, const Out<T>& out,
                                     int64_t row, SelectShared<kThreads>& s) {
  sort_items<kThreads, kMaxItems, false, kBucketSortItems>(buf, count, s);
  write_final<T, kThreads, kMaxItems, kBucketSortItems>(buf, k, out, row, s);
}

// ---- level 0: tiles of values -----------------------------------------------------------------

template <typename T>
struct ValueArgs {
  const T* x = nullptr;  // row r at x + r * x_stride
  int64_t x_stride = 0;
  int64_t row0 = 0;  // first row of this launch
  int64_t n = 0;     // values per row
  int tile = 0;      // values per tile (the last tile of a row may be shorter)
  int tiles = 0;     // tiles per row
  int k = 0;
  int capacity = 0;  // kFinal: items the dynamic shared memory holds, a power of two
  // Sampling launch (blocks: rows * samples): sample s of a row is its tile s * tiles / samples,
  // whose bound for k keys goes to sample_out[row * samples + s] (1 if it has k or fewer).
  uint32_t* sample_out = nullptr;
  // Level 0 of a sampled row: the least of the samples' bounds is the row's.
  const uint32_t* sample_in = nullptr;
  int samples = 0;
  // kFinal: the row's tiles select together as a thread-block cluster of `cluster` blocks (all
  // of them; 1: a row of one tile), and its block 0 writes the row.
  int cluster = 1;
  Out<T> out;
};

// One tile per block. Dynamic shared memory: the tile's keys (tile, rounded up to 4) when it
// falls back to radix selection, then (kFinal) the sort buffer of pow2(min(k, tile)) items and
// kSortSlack bytes; the final tile's candidates use the same space (capacity items). The tiles
// of a cluster find one bound for the whole row and leave their candidates (or, falling back,
// their part of the row's k) in block 0's shared memory, which sorts and writes them.
template <typename T, bool kFinal, int kThreads, int kKeys = kPerThread>
__global__ void __launch_bounds__(kThreads, 2 * kValueTile / (kThreads * kKeys))
    topk_values_kernel(ValueArgs<T> a) {
  constexpr int V = kVec16<T>;
  constexpr int kVecs = kKeys / V;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ SelectShared<kThreads> s;
  const int t = threadIdx.x;
  const bool largest = a.out.largest;

  // Only wide tiles that are not their row's last are sampled, or use the samples.
  constexpr bool kSampled = !kFinal && kThreads == kWideThreads;
  const bool sampling = kSampled && a.sample_out != nullptr;
  if (sampling) allow_next_kernel();  // level 0 may start loading its tiles
  const int per_row = sampling ? a.samples : a.tiles;
  const int64_t row = a.row0 + blockIdx.x / per_row;
  const int tile =
      sampling ? static_cast<int>(static_cast<int64_t>(blockIdx.x % per_row) * a.tiles / a.samples)
               : static_cast<int>(blockIdx.x % per_row);
  const int64_t start = static_cast<int64_t>(tile) * a.tile;
  const int len = static_cast<int>(a.n - start < a.tile ? a.n - start : a.tile);
  const T* src = a.x + row * a.x_stride + start;
  // Only the cluster tiles select in clusters.
  constexpr bool kClustered = kFinal && kKeys == kClusterKeys;
  const RowCluster c = {kClustered ? a.cluster : 1, kClustered ? tile : 0};
  // The sorts' items per thread in registers (cluster tiles have 128 registers).
  constexpr int kSortItems = kClustered ? 8 : kValueSortItems;
  constexpr int kBucketSortItems = kClustered                 ? 8
                                   : kThreads == kWideThreads ? kValueBucketItems
                                                              : kValueSortItems;

  // The tile: 16-byte vectors t, t + kThreads, ... of the aligned body, and one value of the
  // unaligned head or the tail for the first threads. Keys outside the tile are 0.
  const int misalign = static_cast<int>((reinterpret_cast<uintptr_t>(src) % 16) / sizeof(T));
  const int head = min(len, misalign == 0 ? 0 : V - misalign);
  const int vectors = (len - head) / V;
  const int tail_start = head + vectors * V;
  uint32_t key[kKeys];
  {
    Vec<T, V> x[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (t + j * kThreads < vectors) x[j] = load_vec<T, V>(src + head + (t + j * kThreads) * V);
    }
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < V; ++e)
        key[j * V + e] = t + j * kThreads < vectors ? encode(to_float(x[j].v[e]), largest) : 0u;
    }
  }
  int extra_column = -1;
  if (t < head) {
    extra_column = t;
  } else if (t < head + (len - tail_start)) {
    extra_column = tail_start + (t - head);
  }
  const uint32_t extra = extra_column >= 0 ? encode(to_float(src[extra_column]), largest) : 0u;
  auto column_of = [&](int j, int e) { return head + (t + j * kThreads) * V + e; };

  // The row's bound from its samples (warps 0 and 1 read them).
  const int lane = t % 32;
  const int warp = t / 32;
  uint32_t row_bound = 1;
  if (kSampled && a.sample_in != nullptr) {
    wait_for_prior_kernels();  // the samples' bounds
    const uint32_t b = warp_min(t < a.samples ? a.sample_in[row * a.samples + t] : 0xffffffffu);
    if (lane == 0 && warp < 2) s.sample_min[warp] = b;
    __syncthreads();
    row_bound = min(s.sample_min[0], s.sample_min[1]);
  }
  // Counts the keys at or above a bound; places the thread's first by a block scan.
  uint32_t mine = 0, offset = 0, total = 0;
  auto place = [&](uint32_t bound) {
    mine = extra >= bound ? 1u : 0u;
#pragma unroll
    for (int i = 0; i < kKeys; ++i)
      mine += key[i] >= bound ? 1u : 0u;
    cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(mine, offset, total);
  };
  const int64_t slot = row * a.tiles + tile;
  const uint32_t limit = kFinal ? static_cast<uint32_t>(a.capacity) : a.out.slot;
  // Writes the thread's keys at or above the bound as items from dst[offset] on.
  auto write_candidates = [&](uint64_t* dst, uint32_t bound) {
    if (mine == 0) return;
    if (extra >= bound) dst[offset++] = make_item(extra, start + extra_column);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const uint32_t k_je = key[j * V + e];
        if (k_je >= bound) dst[offset++] = make_item(k_je, start + column_of(j, e));
      }
    }
  };
  // The maxima of 8 groups of the thread's keys.
  auto group_maxima = [&](uint32_t(&m)[8]) {
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      m[g] = key[g * (kKeys / 8)];
#pragma unroll
      for (int i = 1; i < kKeys / 8; ++i)
        m[g] = max(m[g], key[g * (kKeys / 8) + i]);
    }
    m[0] = max(m[0], extra);
  };
  uint64_t* const buf = reinterpret_cast<uint64_t*>(dynamic_smem);  // kFinal: the candidates
  // The row's k are taken from a.n keys by a cluster (of one block or more), else from the
  // tile's.
  const int k_tile = kClustered ? a.k : min(a.k, len);
  const int span = kClustered ? static_cast<int>(a.n) : len;

  if constexpr (kClustered) {
    // 1. One bound for the whole row, from the maxima of all its tiles.
    for (int i = t; i < kBins; i += kThreads)
      s.hist[i] = 0;
    if (t == 0) s.shared_total = 0;  // ordered before the peers' adds by cluster_bound's barriers
    uint32_t m[8];
    group_maxima(m);
    const int groups = groups_for<kThreads>((k_tile + c.size - 1) / c.size);
    fold_maxima(m, groups);
    const uint32_t bound =
        cluster_bound<kThreads, T>(m, groups, static_cast<uint32_t>(k_tile), s, c);
    // 2. The candidates go to block 0 (in any order: it sorts them), after those of the blocks
    // that came first; every block counts the row's.
    place(bound);
    if (t < c.size) {
      const uint32_t first = atomicAdd(cluster_peer(&s.shared_total, t), total);
      if (t == 0) s.shared_first = first;
    }
    __syncthreads();
    if (s.shared_first + total <= limit) {
      offset += s.shared_first;
      write_candidates(c.many() ? cluster_peer(buf, 0) : buf, bound);
    }
    // The candidates are in block 0, and every block has the row's count.
    if (c.many()) {
      cluster_sync();
    } else {
      __syncthreads();
    }
    const uint32_t row_total = s.shared_total;
    // More candidates than the merge sort takes (ties, adversarial data): radix selection.
    if (row_total <= min(limit, static_cast<uint32_t>(kThreads * kSortItems))) {
      if (c.rank != 0) return;
      sort_and_write_final<T, kThreads, kSortItems, kBucketSortItems>(
          buf, static_cast<int>(row_total), k_tile, a.out, row, s);
      return;
    }
  } else {
    // 1. The bound: the row's, when few enough keys pass it; else the tile's own (or the row's
    // if higher).
    uint32_t bound = row_bound;
    bool placed = false;
    if (kSampled && row_bound > 1) {
      place(row_bound);
      placed = total <= limit;
      __syncthreads();  // s.scan is free again
    }
    if (!placed && k_tile < span) {
      uint32_t m[8];
      group_maxima(m);
      const int groups = groups_for<kThreads>(k_tile);
      fold_maxima(m, groups);
      bound = max(row_bound, find_bound(m, groups, static_cast<uint32_t>(k_tile), s));
    }
    if (sampling) {
      if (t == 0) a.sample_out[row * a.samples + blockIdx.x % per_row] = bound;
      return;
    }

    // 2. The candidates, placed by a block scan.
    if (!placed) place(bound);
    if (total <= limit) {
      write_candidates(kFinal ? buf : a.out.items + slot * a.out.slot, bound);
      if constexpr (kFinal) {
        sort_and_write_final<T, kThreads, kSortItems, kBucketSortItems>(
            buf, static_cast<int>(total), k_tile, a.out, row, s);
      } else {
        if (t == 0) a.out.counts[slot] = total;
      }
      return;
    }
  }

  // 3. Too many candidates: radix selection over the tile in shared memory.
  uint32_t* tile_keys = reinterpret_cast<uint32_t*>(dynamic_smem);
  for (int i = t; i < kBins; i += kThreads)
    s.hist[i] = 0;
  __syncthreads();
  if (extra_column >= 0) {
    tile_keys[extra_column] = extra;
    atomicAdd(&s.hist[extra >> 21], 1u);
  }
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    if (t + j * kThreads < vectors) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        tile_keys[column_of(j, e)] = key[j * V + e];
        atomicAdd(&s.hist[key[j * V + e] >> 21], 1u);
      }
    }
  }
  __syncthreads();
  Threshold th{0u, 32, static_cast<uint32_t>(k_tile)};  // take all
  if (k_tile < span) th = select_threshold(tile_keys, len, static_cast<uint32_t>(k_tile), s, c);
  if constexpr (kFinal) {
    uint64_t* best = reinterpret_cast<uint64_t*>(tile_keys + ((a.tile + 3) & ~3));
    uint64_t* dst = c.many() ? cluster_peer(best, 0) : best;
    compact(tile_keys, len, th, s, c, [&](uint32_t position, int i) {
      dst[position] = make_item(tile_keys[i], static_cast<uint32_t>(start + i));
    });
    if (c.many()) {
      cluster_sync();  // the row's k are in block 0
      if (c.rank != 0) return;
    }
    sort_and_write_final<T, kThreads, kSortItems, kBucketSortItems>(best, k_tile, k_tile, a.out,
                                                                    row, s);
  } else {
    uint64_t* dst = a.out.items + slot * a.out.slot;
    compact(tile_keys, len, th, s, RowCluster(), [&](uint32_t position, int i) {
      dst[position] = make_item(tile_keys[i], static_cast<uint32_t>(start + i));
    });
    if (t == 0) a.out.counts[slot] = static_cast<uint32_t>(k_tile);
  }
}

// ---- later levels: gathering slots --------------------------------------------------------------

template <typename T>
struct GatherArgs {
  const uint64_t* in = nullptr;  // slot l of the previous level at in + l * slot
  const uint32_t* in_counts = nullptr;
  int64_t row0 = 0;
  int lists_in = 0;  // slots per row
  int lists = 0;     // slots per block, a power of two
  int tiles = 0;     // blocks per row
  int k = 0;
  int slot = 0;  // a power of two
  int slot_log2 = 0;
  int capacity = 0;  // items gathered into shared memory at once, at least 2 * slot
  Out<T> out;
};

// Dynamic shared memory: capacity items (the gathered ones), then slot items (candidates), then
// kSortSlack bytes. Slots that hold more than capacity items together come in chunks.
template <typename T, bool kFinal>
__global__ void __launch_bounds__(kGatherThreads, 1) topk_gather_kernel(GatherArgs<T> a) {
  constexpr int kThreads = kGatherThreads;
  extern __shared__ __align__(16) uint64_t gathered[];
  __shared__ SelectShared<kThreads> s;
  __shared__ uint32_t list_offset[kGatherLists + 1];
  const int t = threadIdx.x;
  const int64_t row = a.row0 + blockIdx.x / a.tiles;
  const int tile = static_cast<int>(blockIdx.x % a.tiles);
  const int first = tile * a.lists;
  const int here = min(a.lists, a.lists_in - first);
  const int64_t in_slot = row * a.lists_in + first;
  uint64_t* candidates = gathered + a.capacity;
  wait_for_prior_kernels();          // the previous level's slots
  if (!kFinal) allow_next_kernel();  // the last level: a block per row, waiting

  // Offsets of the gathered slots: a block scan of their counts.
  {
    constexpr int kPer = (kGatherLists + kThreads) / kThreads;
    uint32_t counts[kPer];
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int l = t * kPer + j;
      counts[j] = l < here ? a.in_counts[in_slot + l] : 0u;
      sum += counts[j];
    }
    uint32_t before = 0, all = 0;
    cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(sum, before, all);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int l = t * kPer + j;
      if (l <= here) list_offset[l] = before;
      before += counts[j];
    }
  }
  __syncthreads();
  // Chunks of slots, each loaded after the items kept from the ones before (gathered[0, kept))
  // and selected with them, until the last.
  const int64_t slot = row * a.tiles + tile;
  int kept = 0;
  for (int l0 = 0;;) {
    // The most slots that fit after the kept items: at least one (kept <= a.slot and
    // a.capacity >= 2 * a.slot).
    int l1 = l0 + 1;
    {
      const uint32_t most = list_offset[l0] + static_cast<uint32_t>(a.capacity - kept);
      int hi = here;
      while (l1 < hi) {
        const int mid = (l1 + hi + 1) / 2;
        if (list_offset[mid] <= most) {
          l1 = mid;
        } else {
          hi = mid - 1;
        }
      }
    }
    const int base = static_cast<int>(list_offset[l0]);
    const int count = static_cast<int>(list_offset[l1]) - base;
    // Item i of the chunk is in the last slot l whose offset is at most base + i. Eight loads
    // in flight per thread: a block that gathers alone waits on memory, not issue.
    for (int i0 = t; i0 < count; i0 += 8 * kThreads) {
      uint64_t item[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = i0 + u * kThreads;
        if (i < count) {
          const uint32_t p = static_cast<uint32_t>(base + i);
          int lo = l0, hi = l1 - 1;
          while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (list_offset[mid] <= p) {
              lo = mid;
            } else {
              hi = mid - 1;
            }
          }
          item[u] = a.in[((in_slot + lo) << a.slot_log2) + (p - list_offset[lo])];
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (i0 + u * kThreads < count) gathered[kept + i0 + u * kThreads] = item[u];
      }
    }
    __syncthreads();
    const int n = kept + count;
    const bool last = l1 == here;

    // 1. The bound: maxima of the thread's items t + (8q + g) * kThreads, folded.
    const int k_tile = min(a.k, n);
    uint32_t bound = 1;
    if (k_tile < n) {
      uint32_t m[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i0 = t; i0 < n; i0 += 8 * kThreads) {
#pragma unroll
        for (int g = 0; g < 8; ++g) {
          const int i = i0 + g * kThreads;
          if (i < n) m[g] = max(m[g], item_key(gathered[i]));
        }
      }
      const int groups = groups_for<kThreads>(k_tile);
      fold_maxima(m, groups);
      bound = find_bound(m, groups, static_cast<uint32_t>(k_tile), s);
    }

    // 2. The candidates, placed by a block scan over each thread's items.
    uint32_t passing = 0;
    for (int i = t; i < n; i += kThreads)
      passing += item_key(gathered[i]) >= bound ? 1u : 0u;
    uint32_t offset = 0, total = 0;
    cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(passing, offset, total);
    if (total <= static_cast<uint32_t>(a.slot)) {
      uint64_t* dst = kFinal || !last ? candidates : a.out.items + slot * a.out.slot;
      for (int i = t; i < n; i += kThreads) {
        const uint64_t item = gathered[i];
        if (item_key(item) >= bound) dst[offset++] = item;
      }
      if (!last) {  // kept for the next chunk
        __syncthreads();
        for (int i = t; i < static_cast<int>(total); i += kThreads)
          gathered[i] = candidates[i];
        kept = static_cast<int>(total);
      } else if constexpr (kFinal) {
        sort_and_write_final<T, kThreads, kGatherSortItems>(candidates, static_cast<int>(total),
                                                            k_tile, a.out, row, s);
        return;
      } else {
        if (t == 0) a.out.counts[slot] = total;
        return;
      }
    } else {
      // 3. Too many candidates: sort everything gathered; its first k_tile are the best.
      sort_items<kThreads, kGatherSortItems, false>(gathered, n, s);
      if (!last) {
        kept = k_tile;
      } else if constexpr (kFinal) {
        write_final<T, kThreads, kGatherSortItems>(gathered, k_tile, a.out, row, s);
        return;
      } else {
        uint64_t* dst = a.out.items + slot * a.out.slot;
        for (int i = t; i < k_tile; i += kThreads)
          dst[i] = gathered[i];
        if (t == 0) a.out.counts[slot] = static_cast<uint32_t>(k_tile);
        return;
      }
    }
    __syncthreads();
    l0 = l1;
  }
}

// ---- host -------------------------------------------------------------------------------------

// The item past a sort buffer that merge_sort's shared storage takes (rounded to 16 bytes).
constexpr size_t kSortSlack = 16;

// Opts `kernel` in to `smem` bytes of dynamic shared memory where its static shared memory
// and that pass 48 KiB. Each kernel instantiation has its own static shared memory, so the
// callers (templates on every kernel parameter) keep its size in a static of their own.
template <typename Kernel>
size_t static_shared(Kernel kernel) {
  cudaFuncAttributes attributes = {};
  return cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess ? attributes.sharedSizeBytes
                                                                   : size_t{48 * 1024};
}

template <typename Kernel>
Status allow_shared(const char* op, Kernel kernel, size_t static_smem, size_t smem) {
  if (smem + static_smem <= 48 * 1024) return Status();
  const cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  return error == cudaSuccess ? Status() : cuda_status(error, op, "setting the shared-memory size");
}

// Launches `launch(row0, blocks)` over the rows in batches of at most 2^31 - 1 blocks.
template <typename Launch>
Status for_row_batches(const char* op, int64_t rows, int tiles, cudaStream_t stream,
                       Launch&& launch) {
  const int64_t per_launch = std::max<int64_t>(1, std::numeric_limits<int32_t>::max() / tiles);
  for (int64_t row0 = 0; row0 < rows; row0 += per_launch) {
    const int64_t batch = std::min(per_launch, rows - row0);
    launch(row0, static_cast<unsigned>(batch * tiles));
    if (Status s = check_launch(op, stream); !s.ok()) return s;
  }
  return Status();
}

template <typename T, bool kFinal, int kThreads, int kKeys = kPerThread>
Status launch_values(const char* op, ValueArgs<T> args, int64_t rows, cudaStream_t stream,
                     bool dependent = false) {
  auto kernel = topk_values_kernel<T, kFinal, kThreads, kKeys>;
  const size_t words = static_cast<size_t>((args.tile + 3) & ~3);
  size_t smem = words * sizeof(uint32_t);
  if (kFinal) {
    smem += static_cast<size_t>(next_pow2(std::min(args.k, args.tile))) * sizeof(uint64_t);
    size_t capacity = 1;
    while (capacity * 2 * sizeof(uint64_t) <= smem)
      capacity *= 2;
    args.capacity = static_cast<int>(capacity);
    smem += kSortSlack;
  }
  static const size_t static_smem = static_shared(kernel);
  if (Status s = allow_shared(op, kernel, static_smem, smem); !s.ok()) return s;
  const int per_row = args.sample_out != nullptr ? args.samples : args.tiles;
  LaunchConfig launch(0, kThreads, smem, stream, args.cluster > 1 ? args.cluster : 0, dependent);
  return for_row_batches(op, rows, per_row, stream, [&](int64_t row0, unsigned blocks) {
    args.row0 = row0;
    launch.set_blocks(blocks);
    (void)launch.launch(kernel, args);  // check_launch reports an error
  });
}

template <typename T, bool kFinal>
Status launch_gather(const char* op, GatherArgs<T> args, int64_t rows, cudaStream_t stream,
                     bool dependent) {
  auto kernel = topk_gather_kernel<T, kFinal>;
  const size_t smem =
      static_cast<size_t>(args.capacity + args.slot) * sizeof(uint64_t) + kSortSlack;
  static const size_t static_smem = static_shared(kernel);
  if (Status s = allow_shared(op, kernel, static_smem, smem); !s.ok()) return s;
  LaunchConfig launch(0, kGatherThreads, smem, stream, 0, dependent);
  return for_row_batches(op, rows, args.tiles, stream, [&](int64_t row0, unsigned blocks) {
    args.row0 = row0;
    launch.set_blocks(blocks);
    (void)launch.launch(kernel, args);  // check_launch reports an error
  });
}

// How many clusters of `tiles` blocks (1 to kMaxRowCluster) of the cluster-tile kernel run on
// the device at once, with the most shared memory they may take; 0 where clusters cannot be
// used (before sm_90, or an image built for an older architecture). Found once per device and
// size.
template <typename T>
Status clusters_at_once(const char* op, int tiles, int* count) {
  *count = 0;
  auto kernel = topk_values_kernel<T, true, kWideThreads, kClusterKeys>;
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices][kMaxRowCluster + 1] = {};  // count + 1; 0: unknown
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) {
    return cuda_status(error, op, "querying the device");
  }
  if (device >= kDevices) return Status();
  std::atomic<int>& entry = known[device][tiles];
  if (const int seen = entry.load(std::memory_order_relaxed); seen != 0) {
    *count = seen - 1;
    return Status();
  }
  cudaFuncAttributes attributes = {};
  bool image = false;
  if (Status s = cluster_image(op, reinterpret_cast<const void*>(kernel), &attributes, &image);
      !s.ok()) {
    return s;
  }
  if (image) {
    const size_t smem = static_cast<size_t>(kClusterTile) * sizeof(uint32_t) +
                        static_cast<size_t>(kTopkMaxK) * sizeof(uint64_t) + kSortSlack;
    if (Status s = allow_shared(op, kernel, attributes.sharedSizeBytes, smem); !s.ok()) return s;
    const LaunchConfig one(static_cast<unsigned>(tiles), kWideThreads, smem, nullptr, tiles);
    const cudaError_t error = cudaOccupancyMaxActiveClusters(count, kernel, &one.config());
    if (error != cudaSuccess) return cuda_status(error, op, "sizing the thread-block clusters");
  }
  entry.store(*count + 1, std::memory_order_relaxed);
  return Status();
}

}  // namespace

template <typename T>
Status run_typed(const char* op, const Plan& plan, ConstMatrixRef x, MatrixRef values,
                 MatrixRef indices, int64_t rows, const TopkOptions& options, void* workspace,
                 cudaStream_t stream) {
  Out<T> final_out;
  final_out.values = static_cast<T*>(values.data);
  final_out.values_stride = values.row_stride;
  final_out.indices = indices.data;
  final_out.indices_stride = indices.row_stride;
  final_out.index64 = options.index_dtype == DType::kInt64;
  final_out.sorted = options.sorted;
  final_out.largest = options.largest;
  const int slot = static_cast<int>(slot_items(plan.levels.front().k));
  auto items = [&](size_t i) {
    return reinterpret_cast<uint64_t*>(static_cast<char*>(workspace) +
                                       plan.buffers[i % 2].items_offset);
  };
  auto counts = [&](size_t i) {
    return reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) +
                                       plan.buffers[i % 2].counts_offset);
  };
  const size_t levels = plan.levels.size();
  // Rows of a few cluster tiles, all of which the device holds at once, are selected in one
  // launch (one cluster per row); otherwise level by level.
  const Level& first = plan.levels.front();
  if (first.n > kValueTile && first.n <= kMaxRowCluster * kClusterTile) {
    const int tiles = static_cast<int>((first.n + kClusterTile - 1) / kClusterTile);
    int at_once = 0;
    if (Status s = clusters_at_once<T>(op, tiles, &at_once); !s.ok()) return s;
    if (rows <= at_once) {
      ValueArgs<T> args;
      args.x = static_cast<const T*>(x.data);
      args.x_stride = x.row_stride;
      args.n = first.n;
      // Balanced tiles, each a multiple of 8 values (16-byte aligned when the row is).
      args.tile = static_cast<int>(((first.n + tiles - 1) / tiles + 7) / 8 * 8);
      args.tiles = tiles;
      args.k = first.k;
      args.cluster = tiles;
      args.out = final_out;
      return launch_values<T, true, kWideThreads, kClusterKeys>(op, args, rows, stream);
    }
  }
  // Kernels after the first may start early (sm_90 images: they wait for the results).
  int sm90 = 0;
  if (levels > 1 || plan.samples > 0) {
    if (Status s = clusters_at_once<T>(op, 1, &sm90); !s.ok()) return s;
  }
  for (size_t i = 0; i < levels; ++i) {
    const Level& level = plan.levels[i];
    const bool last = i + 1 == levels;
    Out<T> out = final_out;
    if (!last) {
      out.items = items(i);
      out.counts = counts(i);
      out.slot = slot;
    }
    const Status status = [&] {
      if (i == 0) {
        uint32_t* bounds =
            reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) + plan.bounds_offset);
        ValueArgs<T> args;
        args.x = static_cast<const T*>(x.data);
        args.x_stride = x.row_stride;
        args.n = level.n;
        args.tile = level.tile;
        args.tiles = level.tiles;
        args.k = level.k;
        args.out = out;
        const bool narrow = level.tile <= kSmallTile && level.k <= kSmallK;
        if (plan.samples > 0) {  // the row's tiles are wide and not its last
          ValueArgs<T> sample = args;
          sample.k = plan.sample_k;
          sample.sample_out = bounds;
          sample.samples = plan.samples;
          if (Status s = launch_values<T, false, kWideThreads>(op, sample, rows, stream); !s.ok()) {
            return s;
          }
          args.sample_in = bounds;
          args.samples = plan.samples;
        }
        if (last) {
          return narrow ? launch_values<T, true, kNarrowThreads>(op, args, rows, stream)
                        : launch_values<T, true, kWideThreads>(op, args, rows, stream);
        }
        const bool dependent = plan.samples > 0 && sm90 > 0;  // on the sampling launch
        return narrow ? launch_values<T, false, kNarrowThreads>(op, args, rows, stream)
                      : launch_values<T, false, kWideThreads>(op, args, rows, stream, dependent);
      }
      GatherArgs<T> args;
      args.in = items(i - 1);
      args.in_counts = counts(i - 1);
      args.lists_in = plan.levels[i - 1].tiles;
      args.lists = level.lists;
      args.tiles = level.tiles;
      args.k = level.k;
      args.slot = slot;
      args.capacity = level.capacity;
      while ((1 << args.slot_log2) < slot)
        ++args.slot_log2;
      args.out = out;
      return last ? launch_gather<T, true>(op, args, rows, stream, sm90 > 0)
                  : launch_gather<T, false>(op, args, rows, stream, sm90 > 0);
    }();
    if (!status.ok()) return status;
  }
  return Status();
}

}  // namespace detail::topk
}  // namespace cudaops

#define CUDAOPS_TOPK_INSTANTIATE(T)                                                                \
  template cudaops::Status cudaops::detail::topk::run_typed<T>(                                    \
      const char*, const Plan&, ConstMatrixRef, MatrixRef, MatrixRef, int64_t, const TopkOptions&, \
      void*, cudaStream_t);
