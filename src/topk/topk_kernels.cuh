#pragma once

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
#include "topk/topk_results.cuh"

namespace cudaops {
namespace detail::topk {
namespace {

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
      bound =
          max(row_bound, find_bound<kThreads, false>(m, groups, static_cast<uint32_t>(k_tile), s));
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
      if (head % 4 == 0) {
        // 16-byte stores: a lane's V keys are consecutive columns (scalar stores V words apart
        // conflict V ways).
        uint4* to = reinterpret_cast<uint4*>(tile_keys + column_of(j, 0));
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
          to[q] = make_uint4(key[j * V + 4 * q], key[j * V + 4 * q + 1], key[j * V + 4 * q + 2],
                             key[j * V + 4 * q + 3]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e)
          tile_keys[column_of(j, e)] = key[j * V + e];
      }
#pragma unroll
      for (int e = 0; e < V; ++e)
        atomicAdd(&s.hist[key[j * V + e] >> 21], 1u);
    }
  }
  __syncthreads();
  Threshold th{0u, 32, static_cast<uint32_t>(k_tile)};  // take all
  if (k_tile < span) {
    th = select_threshold<kThreads, kKeyFloor<T>>(tile_keys, len, static_cast<uint32_t>(k_tile), s,
                                                  c);
  }
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

    // 1. The bound: maxima of the thread's items t + (8q + g) * kThreads, folded; of their
    // primary words, which tell tied 16-bit keys apart by column.
    constexpr int kFloor = kKeyFloor<T>;
    const int k_tile = min(a.k, n);
    uint32_t bound = 1;
    if (k_tile < n) {
      uint32_t m[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i0 = t; i0 < n; i0 += 8 * kThreads) {
#pragma unroll
        for (int g = 0; g < 8; ++g) {
          const int i = i0 + g * kThreads;
          if (i < n) m[g] = max(m[g], item_primary<kFloor>(gathered[i], a.out.column_shift));
        }
      }
      const int groups = groups_for<kThreads>(k_tile);
      fold_maxima(m, groups);
      bound = find_bound<kThreads, true>(m, groups, static_cast<uint32_t>(k_tile), s);
    }

    // 2. The candidates, placed by a block scan over each thread's items.
    uint32_t passing = 0;
    for (int i = t; i < n; i += kThreads)
      passing += item_primary<kFloor>(gathered[i], a.out.column_shift) >= bound ? 1u : 0u;
    uint32_t offset = 0, total = 0;
    cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(passing, offset, total);
    if (total <= static_cast<uint32_t>(a.slot)) {
      uint64_t* dst = kFinal || !last ? candidates : a.out.items + slot * a.out.slot;
      for (int i = t; i < n; i += kThreads) {
        const uint64_t item = gathered[i];
        if (item_primary<kFloor>(item, a.out.column_shift) >= bound) dst[offset++] = item;
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
      sort_items<kThreads, kGatherSortItems, false, kGatherSortItems, kKeyFloor<T>>(
          gathered, n, s, a.out.column_shift);
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
  if (Status s = allow_dynamic_smem(op, reinterpret_cast<const void*>(kernel), smem); !s.ok()) {
    return s;
  }
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
  if (Status s = allow_dynamic_smem(op, reinterpret_cast<const void*>(kernel), smem); !s.ok()) {
    return s;
  }
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
    if (Status s = allow_dynamic_smem(op, reinterpret_cast<const void*>(kernel), smem); !s.ok()) {
      return s;
    }
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
  // Columns are below 2^bits; item_primary takes the kKeyFloor bits of ~column below that.
  int bits = 0;
  while ((int64_t{1} << bits) < plan.levels.front().n)
    ++bits;
  final_out.column_shift = std::max(bits - kKeyFloor<T>, 0);
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
  // launch (one cluster per row); with k of 2048 and more, in one launch of several waves (the
  // levels' slots of 2k items per tile cost more); otherwise level by level.
  const Level& first = plan.levels.front();
  if (first.n > kValueTile && first.n <= kMaxRowCluster * kClusterTile) {
    const int tiles = static_cast<int>((first.n + kClusterTile - 1) / kClusterTile);
    int at_once = 0;
    if (Status s = clusters_at_once<T>(op, tiles, &at_once); !s.ok()) return s;
    if (rows <= at_once || first.k >= 2048) {
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
