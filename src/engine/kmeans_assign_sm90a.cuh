#pragma once

// Batched k-means: the assignment on Hopper's warpgroup matrix instructions (wgmma, sm_90a), for
// 16-bit points of up to kWgmmaMaxDims dimensions, instantiated one dtype per translation unit
// (kmeans_assign_<dtype>_sm90a.cu). Those files alone are compiled for sm_90a (their image loads
// on compute capability 9.0 only); launch_assign takes them there and the mma.sync kernel
// (kmeans_assign.cuh) everywhere else.
//
// Both operands sit in shared memory in the 128-byte swizzled K-major layout that wgmma reads
// without bank conflicts: 64 values of a row per 128 bytes, the row's eight 16-byte pieces
// permuted by the row index mod 8, and rows of K past 64 in further blocks of the same shape.
// A warpgroup multiplies a 64-point tile with 128 centroids by wgmma.m64n128k16 (float32
// accumulators in registers) and keeps each row's running minimum of bias_j - alpha * y . c_j, as
// the mma.sync kernel does. Two kernels:
// - the slab kernel (more than 128 centroids, up to 128 dimensions): the centroids stay in shared
//   memory, 512 at a time, while a producer warpgroup streams the points through to three
//   consumer warpgroups;
// - the block kernel (the rest): a block of two warpgroups takes 128 points and walks the
//   centroids 128 at a time, double-buffered by cp.async; two blocks per SM.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "device/mbarrier.cuh"
#include "engine/kmeans_device.cuh"
#include "engine/kmeans_wgmma.cuh"

namespace cudaops::detail::kmeans {
namespace {

constexpr int kWgmmaGroups = 2;                // warpgroups per block
constexpr int kWgmmaRows = 64 * kWgmmaGroups;  // points per block
constexpr int kWgmmaThreads = kWgThreads * kWgmmaGroups;

/// Bytes of dynamic shared memory: the points, two stages of centroids, two stages of their
/// biases, and the slack that aligns the tiles to 1024 bytes (the swizzle's period).
inline size_t wgmma_smem(int k_blocks) {
  const size_t block = static_cast<size_t>(k_blocks) * 128;  // bytes of a row across K
  return (kWgmmaRows + 2 * kWgmmaN) * block + 2 * kWgmmaN * sizeof(float) + 1024;
}

// Two blocks per SM where their shared memory fits (K up to 128), one otherwise.
template <typename T, int kKBlocks>
__global__ void __launch_bounds__(kWgmmaThreads, kKBlocks <= 2 ? 2 : 1)
    assign_wgmma_kernel(AssignArgs<T> args) {
  extern __shared__ unsigned char raw_smem[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(raw_smem) + 1023) & ~static_cast<uintptr_t>(1023));
  constexpr int block_bytes = kKBlocks * 128;
  unsigned char* a_tile = smem;
  unsigned char* b_tiles = smem + kWgmmaRows * block_bytes;  // two stages of kWgmmaN rows
  float* b_bias = reinterpret_cast<float*>(b_tiles + 2 * kWgmmaN * block_bytes);
  const uint32_t a_addr = shared_address(a_tile);
  const uint32_t b_addr = shared_address(b_tiles);

  const int64_t b = blockIdx.x / args.tiles;
  const int64_t row0 = (blockIdx.x % args.tiles) * kWgmmaRows;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  if (row0 >= len || (args.moved != nullptr && args.moved[b] == 0)) return;
  constexpr int pieces = kKBlocks * 8;  // 16-byte pieces of a row across K
  const int tid = static_cast<int>(threadIdx.x);

  // The block's points: rows past the problem's end and values past d are zero.
  {
    const int row_bytes = args.d * static_cast<int>(sizeof(T));
    for (int idx = tid; idx < kWgmmaRows * pieces; idx += kWgmmaThreads) {
      const int r = idx / pieces, p = idx % pieces;
      const int64_t i = row0 + r;
      const int bytes = i < len ? max(0, min(16, row_bytes - p * 16)) : 0;
      const unsigned char* src =
          reinterpret_cast<const unsigned char*>(first) +
          (bytes > 0 ? (i * args.rows.ld) * static_cast<int64_t>(sizeof(T)) + p * 16 : 0);
      copy16(a_addr + swizzled(kWgmmaRows, r, p), src, bytes);
    }
  }
  const T* operand = args.operand + b * args.k * args.d_pad;
  const float* bias = args.bias + b * args.k;
  const int64_t n_chunks = (args.k + kWgmmaN - 1) / kWgmmaN;
  const int operand_bytes = args.d_pad * static_cast<int>(sizeof(T));
  auto load_chunk = [&](int64_t chunk) {
    const int stage = static_cast<int>(chunk & 1);
    const uint32_t dst = b_addr + stage * kWgmmaN * block_bytes;
    const int64_t j0 = chunk * kWgmmaN;
#pragma unroll 1
    for (int idx = tid; idx < kWgmmaN * pieces; idx += kWgmmaThreads) {
      const int r = idx / pieces, p = idx % pieces;
      const bool inside = j0 + r < args.k;
      const int bytes = inside ? max(0, min(16, operand_bytes - p * 16)) : 0;
      const unsigned char* src = reinterpret_cast<const unsigned char*>(operand) +
                                 (bytes > 0 ? (j0 + r) * operand_bytes + p * 16 : 0);
      copy16(dst + swizzled(kWgmmaN, r, p), src, bytes);
    }
    // Columns past k score +inf: never the minimum.
    for (int c = tid; c < kWgmmaN; c += kWgmmaThreads)
      b_bias[stage * kWgmmaN + c] = j0 + c < args.k ? __ldg(bias + j0 + c) : INFINITY;
  };
  // Groups: the points with the first chunk, then the second chunk (empty if there is none), so
  // that "all but the newest group" is always the chunk about to be used.
  load_chunk(0);
  copy_commit();
  if (n_chunks > 1) load_chunk(1);
  copy_commit();
  copy_wait<1>();
  __syncthreads();

  if (args.means != nullptr) {
    // Centred in place, before rounding: the products then carry the precision of x - mean,
    // which a large mean (as attention keys have) would otherwise take.
    const float* mu = args.means + b * args.d;
    for (int idx = tid; idx < kWgmmaRows * pieces; idx += kWgmmaThreads) {
      const int r = idx / pieces, p = idx % pieces;
      if (row0 + r >= len || p * 8 >= args.d) continue;
      uint4* at = reinterpret_cast<uint4*>(a_tile + swizzled(kWgmmaRows, r, p));
      uint4 w = *at;
      T* v = reinterpret_cast<T*>(&w);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (p * 8 + e < args.d) v[e] = from_float<T>(to_float(v[e]) - __ldg(mu + p * 8 + e));
      }
      *at = w;
    }
    __syncthreads();
  }
  if (args.point_w != nullptr && tid < kWgmmaRows && row0 + tid < len) {
    // Each point's weight, from its row in shared memory (values past d are zero).
    float s = 0.0f;
    for (int p = 0; p < pieces; ++p) {
      const uint4 w = *reinterpret_cast<const uint4*>(a_tile + swizzled(kWgmmaRows, tid, p));
      const T* v = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float f = to_float(v[e]);
        s = fmaf(f, f, s);
      }
    }
    args.point_w[b * args.rows.n + row0 + tid] =
        args.cosine ? (s > 0.0f ? 1.0f / sqrtf(s) : 0.0f) : s;
  }
  fence_async_shared();
  __syncthreads();

  const int group = tid / kWgThreads;
  const int warp = (tid % kWgThreads) / kWarp, lane = tid % kWarp;
  const int quad = lane % 4;
  float best[2] = {INFINITY, INFINITY};
  int best_j[2] = {INT32_MAX, INT32_MAX};
  const uint32_t a_group = a_addr + group * 64 * 128;  // the warpgroup's 64 rows

  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    const int stage = static_cast<int>(chunk & 1);
    const uint32_t b_stage = b_addr + stage * kWgmmaN * block_bytes;
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i)
      acc[i] = 0.0f;
    multiply_chunk<T, kKBlocks>(acc, a_group, kWgmmaRows, b_stage);
    wgmma_commit();
    wgmma_wait<0>();
    hold(acc);
    // Each row's running minimum: first the chunk's smallest score of the row, then, only where
    // it beats the running one, the first column that has it (columns in increasing order, so a
    // tie keeps the lower index). Lane l holds columns 8 j + 2 (l % 4) + e of rows l / 4 (h = 0)
    // and l / 4 + 8 (h = 1) of its warp's 16.
    const float* bj = b_bias + stage * kWgmmaN + 2 * quad;
    float low[2] = {INFINITY, INFINITY};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 bv = *reinterpret_cast<const float2*>(bj + 8 * j);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        low[h] = fminf(low[h], fmaf(-args.alpha, acc[4 * j + 2 * h], bv.x));
        low[h] = fminf(low[h], fmaf(-args.alpha, acc[4 * j + 2 * h + 1], bv.y));
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (low[h] < best[h]) {
        int at = 0;
#pragma unroll
        for (int j = 15; j >= 0; --j) {
          const float2 bv = *reinterpret_cast<const float2*>(bj + 8 * j);
          if (fmaf(-args.alpha, acc[4 * j + 2 * h + 1], bv.y) == low[h]) at = 8 * j + 2 * quad + 1;
          if (fmaf(-args.alpha, acc[4 * j + 2 * h], bv.x) == low[h]) at = 8 * j + 2 * quad;
        }
        best[h] = low[h];
        best_j[h] = static_cast<int>(chunk * kWgmmaN) + at;
      }
    }
    __syncthreads();  // every warpgroup is done with the stage
    if (chunk + 2 < n_chunks) load_chunk(chunk + 2);
    copy_commit();
    copy_wait<1>();  // the next chunk has landed
    fence_async_shared();
    __syncthreads();
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    write_best(args, b, row0 + group * 64 + warp * 16 + h * 8 + lane / 4, len, best[h], best_j[h],
               quad == 0);
  }
}

// ---- the slab kernel: centroids resident, points streamed ------------------------------------

constexpr int kSlabChunks = 4;  // chunks of kWgmmaN centroids a slab holds at most

/// The slab kernel's arguments: each block takes `range` points of one problem (ranges per
/// problem: args.tiles) against the centroids, slab_rows of them at a time in shared memory.
template <typename T>
struct SlabArgs {
  AssignArgs<T> a;
  int64_t range;
  int slab_rows;
};

constexpr int kSlabConsumers = 3;  // consumer warpgroups, taking tiles in turn
constexpr int kSlabThreads = (kSlabConsumers + 1) * kWgThreads;
constexpr int kSlabStages = 5;  // 64-point tiles in shared memory
constexpr int kSlabLag = 2;     // tiles whose loads a producer thread keeps in flight
constexpr int kProducerRegs = 64;
constexpr int kConsumerRegs = 144;
// setmaxnreg moves registers within the block's allocation at launch (65536 / 512 threads, in
// steps of 8: 128 each); asking for more than it holds waits forever.
static_assert(kProducerRegs * kWgThreads + kConsumerRegs * kSlabConsumers * kWgThreads <=
                  65536 / kSlabThreads / 8 * 8 * kSlabThreads,
              "the warpgroups' registers fit the block's");

/// Bytes of dynamic shared memory of the kernel: the slab, the point stages, the slab's biases,
/// the stages' two mbarriers, and the slack that aligns the tiles to 1024 bytes.
inline size_t slab_smem(int k_blocks, int slab_rows) {
  const size_t block = static_cast<size_t>(k_blocks) * 128;
  return static_cast<size_t>(slab_rows) * (block + sizeof(float)) + kSlabStages * 64 * block +
         2 * kSlabStages * sizeof(uint64_t) + 1024;
}

/// f(integral_constant<int, i>) for i = 0 .. kN - 1, in order.
template <typename F, int... kI>
__device__ __forceinline__ void unrolled_impl(F&& f, std::integer_sequence<int, kI...>) {
  (f(std::integral_constant<int, kI>()), ...);
}
template <int kN, typename F>
__device__ __forceinline__ void unrolled(F&& f) {
  unrolled_impl(f, std::make_integer_sequence<int, kN>());
}

/// The consumer warpgroups' barrier (named barrier 1).
template <int kThreads>
__device__ __forceinline__ void consumer_barrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void registers_up() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void registers_down() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

/// v with its low 7 bits replaced by kCol (low7 = 127): the minimum of such values is the minimum
/// score and names its column in one instruction; scores within 2^-16 of each other (relative)
/// rank by column position rather than value (low_bits_set).
template <uint32_t kCol>
__device__ __forceinline__ float tagged(float v, uint32_t low7) {
  return low_bits_set<127u, kCol>(v, low7);
}
/// tagged's bits as a signed integer: among floats of which one at least is not negative, the
/// largest such integer is the largest float (negative floats are negative integers, and
/// non-negative ones order as their bits), so that Hopper's three-way integer maximum (VIMNMX3)
/// takes two scores an instruction where FMNMX takes one.
template <uint32_t kCol>
__device__ __forceinline__ int tagged_int(float v, uint32_t low7) {
  return __float_as_int(tagged<kCol>(v, low7));
}
/// Two floats from shared memory (at a shared-space address).
__device__ __forceinline__ float2 shared_float2(uint32_t address) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(address));
  return v;
}

// The centroids stay in shared memory (a slab of slab_rows at a time; the rows' minima over
// earlier slabs are read back from the results, write_best's merge). A producer warpgroup streams
// the block's 64-point tiles through kSlabStages stages (cp.async; weighed there; handed over
// by mbarriers) and three consumer warpgroups take the tiles in turn, each
// multiplying 128 centroids at a time into its one accumulator set and then finding their minima,
// so that the others' products keep the tensor cores busy while one takes its minima.
// setmaxnreg moves the producer's registers to the consumers. The points are multiplied as given:
// with means, the biases carry alpha * mean . c (Call::fold_means), which costs the consumers an
// FMA a score where centring each tile in place cost the producer more.
template <typename T, int kKBlocks>
__global__ void __launch_bounds__(kSlabThreads, 1) assign_slab_kernel(SlabArgs<T> sa) {
  const AssignArgs<T>& args = sa.a;
  extern __shared__ unsigned char raw_smem[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(raw_smem) + 1023) & ~static_cast<uintptr_t>(1023));
  constexpr int block_bytes = kKBlocks * 128;
  constexpr int pieces = kKBlocks * 8;  // 16-byte pieces of a row across K
  constexpr int kTileBytes = 64 * block_bytes;
  const int slab_rows = sa.slab_rows;
  unsigned char* stages = smem + static_cast<size_t>(slab_rows) * block_bytes;
  float* slab_bias = reinterpret_cast<float*>(stages + kSlabStages * kTileBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(slab_bias + slab_rows);
  uint64_t* empty = full + kSlabStages;
  const uint32_t slab_addr = shared_address(smem);
  const uint32_t stages_addr = shared_address(stages);

  const int64_t b = blockIdx.x / args.tiles;
  const int64_t start = (blockIdx.x % args.tiles) * sa.range;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  const int64_t end = min(start + sa.range, len);
  if (start >= end || (args.moved != nullptr && args.moved[b] == 0)) return;
  const int tid = static_cast<int>(threadIdx.x);
  // (warp-uniform to the compiler: the products are not issued under a divergent branch)
  const int group = __shfl_sync(kFull, tid / kWgThreads, 0), gtid = tid % kWgThreads;
  const int warp = gtid / kWarp, lane = tid % kWarp, quad = lane % 4;
  const T* operand = args.operand + b * args.k * args.d_pad;
  const float* bias = args.bias + b * args.k;
  const int operand_bytes = args.d_pad * static_cast<int>(sizeof(T));
  const int64_t n_tiles = (end - start + 63) / 64;
  if (tid < kSlabStages) {
    mbarrier_init(&full[tid], 4);   // the producer's four warps
    mbarrier_init(&empty[tid], 4);  // the consuming warpgroup's four warps
  }
  __syncthreads();
  if (group == kSlabConsumers) {
    // The producer. A warp moves 16 rows of each tile: lane l the 16-byte piece l % pieces of rows
    // 16 w + kRowsPer i + l / pieces (so that a warp's copy covers whole rows), and weighs those
    // pieces once they land. It runs ahead across slabs: the slab is the consumers'.
    registers_down<kProducerRegs>();
    constexpr int kRowsPer = kWarp / pieces;
    constexpr int kPasses = 16 / kRowsPer;
    const int my_p = lane % pieces, my_r = warp * 16 + lane / pieces;
    const int row_bytes = args.d * static_cast<int>(sizeof(T));
    const int my_bytes = max(0, min(16, row_bytes - my_p * 16));
    const int64_t ld_bytes = args.rows.ld * static_cast<int64_t>(sizeof(T));
    const unsigned char* src = reinterpret_cast<const unsigned char*>(first) + my_p * 16;
    const int64_t steps = (args.k + slab_rows - 1) / slab_rows * n_tiles;
    // Step g loads tile g % n_tiles of slab g / n_tiles and hands over step g - kSlabLag's.
#pragma unroll 1
    for (int64_t g = 0; g < steps + kSlabLag; ++g) {
      // Step g - kSlabLag is handed over before step g waits for its stage, so that a consumer
      // finds its next tile ready when it releases the last one.
      if (g >= kSlabLag) {
        copy_wait<kSlabLag - 1>();  // step g - kSlabLag's pieces have landed
        const int64_t done = g - kSlabLag;
        unsigned char* tile = stages + (done % kSlabStages) * kTileBytes;
        const int64_t row0 = start + (done % n_tiles) * 64;
        if (done < n_tiles && args.point_w != nullptr) {
          // Each row's squared length (first slab only) of x - mean in float32: the pieces' sums,
          // added over the row's `pieces` lanes (the means read here, where the weights are asked
          // for).
          float my_mean[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            my_mean[e] = args.means != nullptr && my_p * 8 + e < args.d
                             ? __ldg(args.means + b * args.d + my_p * 8 + e)
                             : 0.0f;
          }
#pragma unroll
          for (int i = 0; i < kPasses; ++i) {
            const int r = my_r + i * kRowsPer;
            const uint4 w = *reinterpret_cast<const uint4*>(tile + swizzled(64, r, my_p));
            const T* v = reinterpret_cast<const T*>(&w);
            float sq = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const float f = to_float(v[e]) - my_mean[e];
              sq = fmaf(f, f, sq);
            }
#pragma unroll
            for (int o = 1; o < pieces; o <<= 1)
              sq += __shfl_xor_sync(kFull, sq, o);
            if (my_p == 0 && row0 + r < end) {
              args.point_w[b * args.rows.n + row0 + r] =
                  args.cosine ? (sq > 0.0f ? 1.0f / sqrtf(sq) : 0.0f) : sq;
            }
          }
        }
        fence_async_shared();
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&full[done % kSlabStages]);
      }
      if (g < steps) {
        const uint32_t s = static_cast<uint32_t>(g % kSlabStages);
        if (g >= kSlabStages)
          mbarrier_wait(&empty[s], static_cast<uint32_t>(g / kSlabStages - 1) & 1);
        const int64_t t = g % n_tiles;
        const uint32_t dst = stages_addr + s * kTileBytes;
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int r = my_r + i * kRowsPer;
          const int64_t row = start + t * 64 + r;
          const bool inside = row < end && my_bytes > 0;
          copy16(dst + swizzled(64, r, my_p), inside ? src + row * ld_bytes : src,
                 inside ? my_bytes : 0);
        }
      }
      copy_commit();
    }
    return;
  }

  // The consumers.
  registers_up<kConsumerRegs>();
  constexpr int kConsumerThreads = kSlabConsumers * kWgThreads;
  float best[2];
  int best_j[2];
  int64_t j0 = 0;
  // Each row's running minimum and its column, the column packed into the score (tagged): an
  // FMA, a LOP3 and half a three-way maximum per score. Lane l holds columns 8 j + 2 (l % 4) + e of
  // rows l / 4 (h = 0) and l / 4 + 8 (h = 1) of its warp's 16. Cosine's scores are -y . c_j (bias
  // 0, alpha 1): over a chunk of real centroids (kPlain) the minimum is minus the maximum of the
  // tagged products, bit for bit (the tag leaves the sign alone), without the FMA and the bias
  // loads.
  const uint32_t bias_addr = shared_address(slab_bias) + 8 * quad;
  uint32_t low7 = 127;
  asm volatile("" : "+r"(low7));  // kept in a register for tagged's LOP3
  // Float minima, for a warp where the integer maxima below do not give the float order.
  auto arg_min_float = [&](const float(&acc)[64], int chunk, auto plain) {
    constexpr bool kPlain = decltype(plain)::value;
    float low[2][2][2];  // [h][e][j % 2]: eight chains of eight
    auto step = [&](auto j_constant) {
      constexpr int j = decltype(j_constant)::value, q = j % 2;
      if constexpr (kPlain) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float v0 = tagged<8 * j>(acc[4 * j + 2 * h], low7);
          const float v1 = tagged<8 * j + 1>(acc[4 * j + 2 * h + 1], low7);
          low[h][0][q] = j < 2 ? v0 : fmaxf(low[h][0][q], v0);
          low[h][1][q] = j < 2 ? v1 : fmaxf(low[h][1][q], v1);
        }
      } else {
        const float2 bv = shared_float2(bias_addr + (chunk * kWgmmaN + 8 * j) * 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float v0 = tagged<8 * j>(fmaf(-args.alpha, acc[4 * j + 2 * h], bv.x), low7);
          const float v1 = tagged<8 * j + 1>(fmaf(-args.alpha, acc[4 * j + 2 * h + 1], bv.y), low7);
          low[h][0][q] = j < 2 ? v0 : fminf(low[h][0][q], v0);
          low[h][1][q] = j < 2 ? v1 : fminf(low[h][1][q], v1);
        }
      }
    };
    unrolled<16>(step);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float lowest =
          kPlain ? -fmaxf(fmaxf(low[h][0][0], low[h][0][1]), fmaxf(low[h][1][0], low[h][1][1]))
                 : fminf(fminf(low[h][0][0], low[h][0][1]), fminf(low[h][1][0], low[h][1][1]));
      const int col = static_cast<int>(j0) + chunk * kWgmmaN +
                      static_cast<int>(__float_as_uint(lowest) & 127u) + 2 * quad;
      const bool better = lowest < best[h];
      best_j[h] = better ? col : best_j[h];
      best[h] = better ? lowest : best[h];
    }
  };
  auto arg_min = [&](const float(&acc)[64], int chunk, auto plain) {
    constexpr bool kPlain = decltype(plain)::value;
    // The largest of a row's tagged values of -score (so the minimum score, negated) by integer
    // maxima, two chains a row of sixteen values, two new values an instruction. Where all of
    // a lane's values of a row are negative the integer order is not the float order; that rare
    // warp takes the float minima instead (the same bits the integer maxima give otherwise).
    int top[2][2];  // [h][e]
    auto bias_pair = [&](int j) {
      return kPlain ? float2{0.f, 0.f} : shared_float2(bias_addr + (chunk * kWgmmaN + 8 * j) * 4);
    };
    // -score of column 8 j + e of row h: the product itself for kPlain (cosine: score -y . c),
    // else alpha * y . c - bias (the FMA's rounding is symmetric: exactly minus the score).
    auto neg = [&](int j, int h, int e, float2 bv) {
      if constexpr (kPlain) {
        return acc[4 * j + 2 * h + e];
      } else {
        return fmaf(args.alpha, acc[4 * j + 2 * h + e], -(e == 0 ? bv.x : bv.y));
      }
    };
    auto step = [&](auto p_constant) {
      constexpr int p = decltype(p_constant)::value, j = 2 * p;
      const float2 ba = bias_pair(j), bb = bias_pair(j + 1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int a0 = tagged_int<8 * j>(neg(j, h, 0, ba), low7);
        const int b0 = tagged_int<8 * j + 8>(neg(j + 1, h, 0, bb), low7);
        const int a1 = tagged_int<8 * j + 1>(neg(j, h, 1, ba), low7);
        const int b1 = tagged_int<8 * j + 9>(neg(j + 1, h, 1, bb), low7);
        top[h][0] = p == 0 ? max(a0, b0) : __vimax3_s32(top[h][0], a0, b0);
        top[h][1] = p == 0 ? max(a1, b1) : __vimax3_s32(top[h][1], a1, b1);
      }
    };
    unrolled<8>(step);
    const int bits[2] = {max(top[0][0], top[0][1]), max(top[1][0], top[1][1])};
    // A lane's values of a row all negative (its scores all positive) can only matter while the
    // row's running minimum is positive too; then the whole warp takes the float minima.
    if (__any_sync(kFull, (bits[0] < 0 && best[0] > 0.f) || (bits[1] < 0 && best[1] > 0.f))) {
      arg_min_float(acc, chunk, plain);
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float lowest = -__int_as_float(bits[h]);
      const int col = static_cast<int>(j0) + chunk * kWgmmaN +
                      static_cast<int>(static_cast<uint32_t>(bits[h]) & 127u) + 2 * quad;
      const bool better = lowest < best[h];
      best_j[h] = better ? col : best_j[h];
      best[h] = better ? lowest : best[h];
    }
  };
  // A tile's chunks (a compile-time count), each multiplied into the consumer's one accumulator
  // set and then its minima taken: the three consumers overlap one another, one or two
  // multiplying while the others take minima. kCosine: the plain minima over chunks of real
  // centroids (`rows` of the slab).
  auto products = [&](auto count, auto cosine, uint32_t a_addr, uint64_t* release, int rows) {
    constexpr int kC = decltype(count)::value;
    constexpr bool kCosine = decltype(cosine)::value;
    float acc[64];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      multiply_chunk<T, kKBlocks>(acc, a_addr, 64, slab_addr + c * kWgmmaN * block_bytes);
      wgmma_commit();
      wgmma_wait<0>();
      if (c + 1 == kC) {
        // The tensor cores are done with the stage.
        __syncwarp();
        if (lane == 0) mbarrier_arrive(release);
      }
      hold(acc);
      if (kCosine && (c + 1) * kWgmmaN <= rows) {
        arg_min(acc, c, std::true_type());
      } else {
        arg_min(acc, c, std::false_type());
      }
    }
  };
  uint32_t base = 0;  // tiles handed over before this slab: the stages' and phases' count
  for (; j0 < args.k; j0 += slab_rows) {
    const int rows = args.k - j0 < slab_rows ? static_cast<int>(args.k - j0) : slab_rows;
    const int chunks = (rows + kWgmmaN - 1) / kWgmmaN;
    consumer_barrier<kConsumerThreads>();  // the consumers are done with the previous slab
#pragma unroll 1
    for (int idx = tid; idx < chunks * kWgmmaN * pieces; idx += kConsumerThreads) {
      const int r = idx / pieces, p = idx % pieces;
      const int bytes = r < rows ? max(0, min(16, operand_bytes - p * 16)) : 0;
      const unsigned char* src = reinterpret_cast<const unsigned char*>(operand) +
                                 (bytes > 0 ? (j0 + r) * operand_bytes + p * 16 : 0);
      copy16(slab_addr + (r / kWgmmaN) * kWgmmaN * block_bytes + swizzled(kWgmmaN, r % kWgmmaN, p),
             src, bytes);
    }
    // Columns past k score +inf: never the minimum.
    for (int c = tid; c < chunks * kWgmmaN; c += kConsumerThreads)
      slab_bias[c] = c < rows ? __ldg(bias + j0 + c) : INFINITY;
    copy_commit();
    copy_wait<0>();
    fence_async_shared();
    consumer_barrier<kConsumerThreads>();
#pragma unroll 1
    for (int64_t t = group; t < n_tiles; t += kSlabConsumers) {
      const uint32_t g = base + static_cast<uint32_t>(t);
      const uint32_t s = g % kSlabStages;
      mbarrier_wait(&full[s], (g / kSlabStages) & 1);
      const uint32_t a_addr = stages_addr + s * kTileBytes;
      best[0] = best[1] = INFINITY;
      best_j[0] = best_j[1] = INT32_MAX;
      auto count = [&](auto cosine) {
        switch (chunks) {
          case 4:
            products(std::integral_constant<int, 4>(), cosine, a_addr, &empty[s], rows);
            break;
          case 3:
            products(std::integral_constant<int, 3>(), cosine, a_addr, &empty[s], rows);
            break;
          case 2:
            products(std::integral_constant<int, 2>(), cosine, a_addr, &empty[s], rows);
            break;
          default:
            products(std::integral_constant<int, 1>(), cosine, a_addr, &empty[s], rows);
        }
      };
      // (With means, cosine's biases are not 0: the FMA's minima.)
      if (args.cosine && args.means == nullptr) {
        count(std::true_type());
      } else {
        count(std::false_type());
      }
      const int64_t row0 = start + t * 64;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        write_best(args, b, row0 + warp * 16 + h * 8 + lane / 4, end, best[h], best_j[h], quad == 0,
                   j0 > 0);
      }
    }
    base += static_cast<uint32_t>(n_tiles);
  }
}

/// Whether the wgmma kernel of T runs on the current device (image_loads, asked once per
/// device); CUDAOPS_KMEANS_WGMMA=0 turns it off.
template <typename T>
bool wgmma_runs() {
  static const bool enabled = [] {
    const char* value = std::getenv("CUDAOPS_KMEANS_WGMMA");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  bool loads = false;
  return enabled &&
         image_loads(kOp, reinterpret_cast<const void*>(assign_wgmma_kernel<T, 1>), &loads).ok() &&
         loads;
}

/// Centroids the slab kernel holds at once for rows of k_blocks 128-byte blocks: at most
/// kSlabChunks chunks and what the device's shared memory takes (0: not one chunk).
inline Status slab_rows_for(const void* kernel, int64_t k, int k_blocks, int* rows) {
  size_t room = 0;
  if (Status s = max_dynamic_smem(kOp, kernel, &room); !s.ok()) return s;
  const int64_t most = static_cast<int64_t>(room);
  const int64_t fixed = static_cast<int64_t>(slab_smem(k_blocks, 0));
  const int64_t fit = (most - fixed) / (k_blocks * 128 + 4) / kWgmmaN * kWgmmaN;
  const int64_t want = (k + kWgmmaN - 1) / kWgmmaN * kWgmmaN;
  *rows =
      static_cast<int>(std::max<int64_t>(std::min({fit, want, int64_t{kSlabChunks} * kWgmmaN}), 0));
  return Status();
}

template <typename T, int kKBlocks>
Status launch_slabs(const Call& call, int slab_rows, cudaStream_t stream, bool* launched_here) {
  // Ranges of at most 32 tiles of 128 points, and enough of them (about two per SM of a large
  // device) that small batches still fill the device.
  const int64_t batch = call.points.batch;
  const int64_t tiles = std::max<int64_t>((call.points.n + 127) / 128, 1);
  const int64_t pieces =
      std::max((tiles + 31) / 32, std::min<int64_t>((264 + batch - 1) / batch, tiles));
  const int64_t range = 128 * ((tiles + pieces - 1) / pieces);
  const SlabArgs<T> args{assign_args<T>(call, range), range, slab_rows};
  const auto kernel = assign_slab_kernel<T, kKBlocks>;
  const size_t smem = slab_smem(kKBlocks, slab_rows);
  if (Status s = allow_smem(kernel, smem); !s.ok()) return s;
  kernel<<<static_cast<unsigned>(batch * args.a.tiles), kSlabThreads, smem, stream>>>(args);
  *launched_here = true;
  return launched(stream);
}

template <typename T, int kKBlocks>
Status launch_blocks(const AssignArgs<T>& args, int64_t batch, cudaStream_t stream,
                     bool* launched_here) {
  const auto kernel = assign_wgmma_kernel<T, kKBlocks>;
  const size_t smem = wgmma_smem(kKBlocks);
  if (Status s = allow_smem(kernel, smem); !s.ok()) return s;
  kernel<<<static_cast<unsigned>(batch * args.tiles), kWgmmaThreads, smem, stream>>>(args);
  *launched_here = true;
  return launched(stream);
}

/// *rows = the centroids of call the slab kernel holds at once where it takes call (more
/// centroids than one chunk, 128 dimensions or fewer, the wgmma kernels run here), else 0.
template <typename T>
Status slab_rows_of(const Call& call, int* rows) {
  *rows = 0;
  if (call.points.d > kWgmmaMaxDims || !wgmma_runs<T>()) return Status();
  const int k_blocks = static_cast<int>((call.points.d + kAtomValues - 1) / kAtomValues);
  if (k_blocks > 2 || call.k <= kWgmmaN) return Status();
  const auto kernel = k_blocks == 1 ? assign_slab_kernel<T, 1> : assign_slab_kernel<T, 2>;
  return slab_rows_for(reinterpret_cast<const void*>(kernel), call.k, k_blocks, rows);
}

}  // namespace

template <typename T>
Status assign_folds_means(const Call& call, bool* folds) {
  *folds = false;
  if (!call.center || call.means == nullptr) return Status();
  int rows = 0;
  if (Status s = slab_rows_of<T>(call, &rows); !s.ok()) return s;
  *folds = rows > 0;
  return Status();
}

template <typename T>
Status launch_assign_wgmma(const Call& call, cudaStream_t stream, bool* launched_here) {
  *launched_here = false;
  if (call.points.d > kWgmmaMaxDims || !wgmma_runs<T>()) return Status();
  const int k_blocks = static_cast<int>((call.points.d + kAtomValues - 1) / kAtomValues);
  const AssignArgs<T> args = assign_args<T>(call, kWgmmaRows);
  int slab_rows = 0;
  if (Status s = slab_rows_of<T>(call, &slab_rows); !s.ok()) return s;
  if (slab_rows > 0) {
    if (call.center && !call.fold_means) {
      // (fit and assign set it: an internal call that did not would be assigned wrongly.)
      return Status(
          StatusCode::kNotSupported,
          std::string(kOp) + ": centred points need the means in the slab kernel's biases");
    }
    return k_blocks == 1 ? launch_slabs<T, 1>(call, slab_rows, stream, launched_here)
                         : launch_slabs<T, 2>(call, slab_rows, stream, launched_here);
  }
  switch (k_blocks) {
    case 1:
      return launch_blocks<T, 1>(args, call.points.batch, stream, launched_here);
    case 2:
      return launch_blocks<T, 2>(args, call.points.batch, stream, launched_here);
    case 3:
      return launch_blocks<T, 3>(args, call.points.batch, stream, launched_here);
    default:
      return launch_blocks<T, 4>(args, call.points.batch, stream, launched_here);
  }
}

}  // namespace cudaops::detail::kmeans

#define CUDAOPS_KMEANS_ASSIGN_SM90A_INSTANTIATE(T)                                               \
  template cudaops::Status cudaops::detail::kmeans::launch_assign_wgmma<T>(const Call&,          \
                                                                           cudaStream_t, bool*); \
  template cudaops::Status cudaops::detail::kmeans::assign_folds_means<T>(const Call&, bool*);
