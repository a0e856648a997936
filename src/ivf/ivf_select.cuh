#pragma once

// The IVF search's selection: a block finds the k best of a row's items, where an item is a unique
// 64-bit key (a score's rank key above, the complement of an id below: larger is better, ties to
// the lower id). A radix select of 11-bit digits from the top narrows the bin that holds the k-th
// item and stops as soon as that bin is taken whole, so that a row is visited two or three times,
// not sorted; rows of up to kHeldTile items are held in registers for it. Only the k results are
// sorted.
#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace cudaops::detail::ivf {
namespace {

constexpr int kSelectThreads = 512;
constexpr int kDigitBits = 11;
constexpr int kDigits = 1 << kDigitBits;
constexpr int kBinsPerThread = kDigits / kSelectThreads;
static_assert(kBinsPerThread * kSelectThreads == kDigits, "every thread holds whole bins");

/// A float's rank key: unsigned order is the float's order, -0.0 below +0.0, NaN above all.
__device__ __forceinline__ uint32_t rank_key(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t ordered =
      bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
  return f != f ? 0xffffffffu : ordered;
}

__device__ __forceinline__ float rank_value(uint32_t key) {
  if (key == 0xffffffffu) return __uint_as_float(0x7fc00000u);
  return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

/// The item of a score and a non-negative id.
__device__ __forceinline__ uint64_t make_item(float score, int32_t id) {
  return (static_cast<uint64_t>(rank_key(score)) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ float item_score(uint64_t item) {
  return rank_value(static_cast<uint32_t>(item >> 32));
}

__device__ __forceinline__ int32_t item_id(uint64_t item) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(item));
}

using SelectScan = cub::BlockScan<uint32_t, kSelectThreads>;

struct SelectShared {
  uint32_t hist[kDigits];
  typename SelectScan::TempStorage scan;
  uint64_t all[kSelectThreads / 32];  // per warp: the AND of its items
  uint64_t any[kSelectThreads / 32];  // and the OR
  uint64_t prefix;
  uint64_t mask;
  uint32_t left;  // items still wanted from the bin `prefix` names
  int done;
  int top;  // bits below it differ between items
};

/// The rank key of -inf (an empty cluster's score).
constexpr uint32_t kNegInfKey = 0x007fffffu;

constexpr int kHeldItems = 16;  // items a thread holds in registers
constexpr int64_t kHeldTile = int64_t{kSelectThreads} * kHeldItems;

/// Items per thread of a row of n: all of a row of at most kHeldTile spread evenly over the
/// threads, else kHeldItems per thread per tile.
__device__ __forceinline__ int run_length(int64_t n) {
  return n <= kHeldTile ? static_cast<int>((n + kSelectThreads - 1) / kSelectThreads) : kHeldItems;
}

/// This thread's run of the tile at tile0 (len items from tile0 + len * thread, clipped to n)
/// into it; returns how many it holds.
template <typename Load>
__device__ __forceinline__ int load_run(int64_t tile0, int64_t n, int len, Load load,
                                        uint64_t (&it)[kHeldItems]) {
  const int64_t first = tile0 + int64_t{threadIdx.x} * len;
  const int mine = static_cast<int>(max(int64_t{0}, min(static_cast<int64_t>(len), n - first)));
#pragma unroll
  for (int u = 0; u < kHeldItems; ++u)
    it[u] = u < mine ? load(first + u) : 0;
  return mine;
}

/// Calls f(item, valid) for each of this thread's item slots of a row of n (load(i) gives item i),
/// every lane of the block the same number of times (so that f may use warp collectives): from
/// registers (`it`, `mine`, loaded once) when the row is one tile, else tile by tile.
template <typename Load, typename F>
__device__ __forceinline__ void for_each_item(int64_t n, Load load,
                                              const uint64_t (&it)[kHeldItems], int mine, F f) {
  const int len = run_length(n);
  if (n <= kHeldTile) {
#pragma unroll
    for (int u = 0; u < kHeldItems; ++u)
      if (u < len) f(it[u], u < mine);
    return;
  }
  for (int64_t tile0 = 0; tile0 < n; tile0 += kHeldTile) {
    uint64_t run[kHeldItems];
    const int m = load_run(tile0, n, kHeldItems, load, run);
#pragma unroll
    for (int u = 0; u < kHeldItems; ++u)
      f(run[u], u < m);
  }
}

/// The bound of the k best of n items (`each(f)` calls f(item, valid) on each of this thread's
/// item slots, as for_each_item does): afterwards item x is among them exactly when
/// (x & s.mask) >= s.prefix. With n <= k every item is.
///
/// The bits every item shares are found first (an AND and an OR over the row) and skipped, so
/// that the first digit already spreads the items; counts of one warp for one bin go in as one
/// atomic (scores of a row share their top bits, and same-address atomics would serialise).
template <typename Each>
__device__ void select_bound(int64_t n, int64_t k, Each each, SelectShared& s) {
  if (n <= k) {
    if (threadIdx.x == 0) {
      s.prefix = 0;
      s.mask = 0;
    }
    __syncthreads();
    return;
  }
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  uint64_t all = ~uint64_t{0}, any = 0;
  each([&](uint64_t item, bool valid) {
    if (valid) {
      all &= item;
      any |= item;
    }
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    all &= __shfl_xor_sync(0xffffffffu, all, o);
    any |= __shfl_xor_sync(0xffffffffu, any, o);
  }
  if (lane == 0) {
    s.all[warp] = all;
    s.any[warp] = any;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSelectThreads / 32; ++w) {
      all &= s.all[w];
      any |= s.any[w];
    }
    const int top = 64 - __clzll(static_cast<long long>(all ^ any));  // > 0: items are unique
    s.top = top;
    s.mask = top == 64 ? 0 : ~((uint64_t{1} << top) - 1);
    s.prefix = all & s.mask;
    s.left = static_cast<uint32_t>(k);
    s.done = 0;
  }
  __syncthreads();
  for (int top = s.top; top > 0; top -= kDigitBits) {
    const int shift = top > kDigitBits ? top - kDigitBits : 0;
    const uint64_t digit = (uint64_t{1} << (top - shift)) - 1;
    const uint64_t mask = s.mask, prefix = s.prefix;
    const uint32_t left = s.left;
    for (int b = threadIdx.x; b < kDigits; b += kSelectThreads)
      s.hist[b] = 0;
    __syncthreads();
    each([&](uint64_t item, bool valid) {
      const bool in = valid && (item & mask) == prefix;
      const uint32_t bin = in ? static_cast<uint32_t>((item >> shift) & digit) : kDigits;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (in && (peers & ((1u << lane) - 1)) == 0) atomicAdd(&s.hist[bin], __popc(peers));
    });
    __syncthreads();
    // Thread t holds bins kDigits - 1 - kBinsPerThread * t downwards: the counts above a bin are
    // an exclusive scan.
    uint32_t c[kBinsPerThread];
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      c[j] = s.hist[kDigits - 1 - (threadIdx.x * kBinsPerThread + j)];
      sum += c[j];
    }
    uint32_t above = 0;
    SelectScan(s.scan).ExclusiveSum(sum, above);
    if (above < left && above + sum >= left) {  // one thread: its bins hold the k-th item
#pragma unroll
      for (int j = 0; j < kBinsPerThread; ++j) {
        if (above + c[j] >= left) {
          const uint64_t bin = kDigits - 1 - (threadIdx.x * kBinsPerThread + j);
          s.prefix = prefix | (bin << shift);
          s.mask = mask | (digit << shift);
          s.left = left - above;
          s.done = c[j] == left - above;
          break;
        }
        above += c[j];
      }
    }
    __syncthreads();
    if (s.done) return;  // the same for every thread
  }
}

constexpr int kMaxSortRuns = 4;  // runs of 64 items a warp sorts
constexpr int kMaxSorted = kSelectThreads / 32 * kMaxSortRuns * 64;

/// Sorts buf[0, n) descending: a bitonic sort, n a power of two from 64 to kMaxSorted. Each warp
/// holds runs of 64 items in registers for the strides below 64 (shuffles, no barrier); only the
/// longer strides go through shared memory.
__device__ void sort_descending(uint64_t* buf, int n) {
  constexpr int kWarps = kSelectThreads / 32;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int runs = n / 64;
  uint64_t v[kMaxSortRuns][2];
  const auto move = [&](bool to_shared) {
#pragma unroll
    for (int q = 0; q < kMaxSortRuns; ++q) {
      const int r = warp + q * kWarps;
      if (r >= runs) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint64_t& at = buf[r * 64 + h * 32 + lane];
        if (to_shared) {
          at = v[q][h];
        } else {
          v[q][h] = at;
        }
      }
    }
  };
  move(false);
  for (int size = 2; size <= n; size <<= 1) {
    if (size >= 128) {
      move(true);
      __syncthreads();
      for (int stride = size / 2; stride >= 64; stride >>= 1) {
        for (int t = threadIdx.x; t < n / 2; t += kSelectThreads) {
          const int i = 2 * t - (t & (stride - 1)), j = i + stride;
          const uint64_t a = buf[i], b = buf[j];
          if ((a < b) == ((i & size) == 0)) {
            buf[i] = b;
            buf[j] = a;
          }
        }
        __syncthreads();
      }
      move(false);
    }
    for (int stride = min(size / 2, 32); stride > 0; stride >>= 1) {
#pragma unroll
      for (int q = 0; q < kMaxSortRuns; ++q) {
        const int r = warp + q * kWarps;
        if (r >= runs) continue;  // the same for the whole warp
        if (stride == 32) {
          const bool desc = ((r * 64 + lane) & size) == 0;
          const uint64_t a = v[q][0], b = v[q][1];
          if ((a < b) == desc) {
            v[q][0] = b;
            v[q][1] = a;
          }
          continue;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = r * 64 + h * 32 + lane;
          const uint64_t o = __shfl_xor_sync(0xffffffffu, v[q][h], stride);
          const bool desc = (i & size) == 0, lower = (lane & stride) == 0;
          v[q][h] = (lower == desc) ? max(v[q][h], o) : min(v[q][h], o);
        }
      }
    }
  }
  move(true);
  __syncthreads();
}

}  // namespace
}  // namespace cudaops::detail::ivf
