#pragma once

// A streaming elementwise engine: out[i] = op(in_0[i], ..., in_{Arity-1}[i]) in float32, rounded
// once to T. One kernel for every elementwise op; an op is a small functor.
//
// Vector path: when every pointer sits at the same offset from a 16-byte boundary, the first
// `head` elements bring the output onto a 128-byte boundary (and the inputs onto 16-byte ones),
// the body moves 16-byte vectors, and the last `tail` elements (< one vector) finish. Both edges
// are done by block 0. Aligning the output to 128 bytes rather than 16 lets every warp write whole
// 32-byte sectors, so a pointer offset by one element runs at the speed of an aligned one.
// Scalar path: pointers with different offsets are read element by element, still coalesced,
// with as many loads in flight per thread as the vector path.

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <sstream>

#include "core/launch.h"
#include "cudaops/status.h"
#include "device/numeric.cuh"
#include "device/vector.cuh"

namespace cudaops::detail {

template <typename T, int Arity>
struct Operands {
  const T* in[Arity];
  T* out;
};

inline constexpr int kElementwiseThreads = 256;
// Alignment of the output at the start of the vector body.
inline constexpr int kElementwiseAlign = 128;
// 16-byte vectors per input per thread, all loaded before the first is used: eight loads in
// flight per thread whatever the number of inputs.
template <int Arity>
inline constexpr int kElementwiseUnroll = Arity == 1 ? 8 : 4;

template <typename Op>
__device__ __forceinline__ float apply(const Op& op, const float (&x)[1]) {
  return op(x[0]);
}
template <typename Op>
__device__ __forceinline__ float apply(const Op& op, const float (&x)[2]) {
  return op(x[0], x[1]);
}

template <typename T, int Arity, typename Op>
__device__ __forceinline__ void elementwise_one(const Operands<T, Arity>& p, int64_t i,
                                                const Op& op) {
  float x[Arity];
#pragma unroll
  for (int a = 0; a < Arity; ++a)
    x[a] = to_float(p.in[a][i]);
  p.out[i] = from_float<T>(apply(op, x));
}

template <typename T, int Arity, typename Op>
__global__ void __launch_bounds__(kElementwiseThreads)
    elementwise_vec_kernel(Operands<T, Arity> p, int64_t num_items, int64_t head, int64_t num_vec,
                           Op op) {
  constexpr int V = kVec16<T>;
  constexpr int kThreads = kElementwiseThreads;
  constexpr int kUnroll = kElementwiseUnroll<Arity>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;

  Vec<T, V> x[Arity][kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = first + u * kThreads;
    if (v < num_vec) {
#pragma unroll
      for (int a = 0; a < Arity; ++a)
        x[a][u] = load_vec<T, V>(p.in[a] + head + v * V);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = first + u * kThreads;
    if (v < num_vec) {
      Vec<T, V> y;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float args[Arity];
#pragma unroll
        for (int a = 0; a < Arity; ++a)
          args[a] = to_float(x[a][u].v[k]);
        y.v[k] = from_float<T>(apply(op, args));
      }
      store_vec<T, V>(p.out + head + v * V, y);
    }
  }

  if (blockIdx.x == 0) {
    // head < 128 / sizeof(T) and tail < V, both fewer than the block's threads.
    if (threadIdx.x < head) elementwise_one(p, threadIdx.x, op);
    const int64_t tail = head + num_vec * V + threadIdx.x;
    if (tail < num_items) elementwise_one(p, tail, op);
  }
}

template <typename T, int Arity, typename Op>
__global__ void __launch_bounds__(kElementwiseThreads)
    elementwise_scalar_kernel(Operands<T, Arity> p, int64_t num_items, Op op) {
  constexpr int kItems = kElementwiseUnroll<Arity> * kVec16<T>;
  constexpr int kThreads = kElementwiseThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kItems + threadIdx.x;

  float x[Arity][kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = first + j * kThreads;
    if (i < num_items) {
#pragma unroll
      for (int a = 0; a < Arity; ++a)
        x[a][j] = to_float(p.in[a][i]);
    }
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = first + j * kThreads;
    if (i < num_items) {
      float args[Arity];
#pragma unroll
      for (int a = 0; a < Arity; ++a)
        args[a] = x[a][j];
      p.out[i] = from_float<T>(apply(op, args));
    }
  }
}

/// Launches op over num_items elements. The arguments have been validated by the caller.
template <typename T, int Arity, typename Op>
Status launch_elementwise(const char* name, const Operands<T, Arity>& p, int64_t num_items,
                          const Op& op, cudaStream_t stream) {
  if (num_items == 0) return Status();
  constexpr int V = kVec16<T>;
  constexpr int64_t kThreads = kElementwiseThreads;
  constexpr int64_t kPerBlock = kThreads * kElementwiseUnroll<Arity>;
  static_assert(kElementwiseAlign / sizeof(T) <= kElementwiseThreads, "head must fit in a block");

  const uintptr_t out_offset = address(p.out) % 16;
  bool same_offset = true;
  for (int a = 0; a < Arity; ++a)
    same_offset = same_offset && address(p.in[a]) % 16 == out_offset;

  int64_t blocks = 0;
  int64_t head = 0;
  int64_t num_vec = 0;
  if (same_offset) {
    const uintptr_t to_boundary =
        (kElementwiseAlign - address(p.out) % kElementwiseAlign) % kElementwiseAlign;
    head = static_cast<int64_t>(to_boundary / sizeof(T));
    if (head > num_items) head = num_items;
    num_vec = (num_items - head) / V;
    blocks = (num_vec + kPerBlock - 1) / kPerBlock;
    if (blocks == 0) blocks = 1;
  } else {
    blocks = (num_items + kPerBlock * V - 1) / (kPerBlock * V);
  }
  if (blocks > INT_MAX) {
    std::ostringstream text;
    text << name << ": num_items " << num_items << " is more than one launch can cover";
    return Status(StatusCode::kInvalidArgument, text.str());
  }

  const dim3 grid(static_cast<unsigned>(blocks));
  if (same_offset) {
    elementwise_vec_kernel<T, Arity, Op>
        <<<grid, kElementwiseThreads, 0, stream>>>(p, num_items, head, num_vec, op);
  } else {
    elementwise_scalar_kernel<T, Arity, Op>
        <<<grid, kElementwiseThreads, 0, stream>>>(p, num_items, op);
  }
  return check_launch(name, stream);
}

}  // namespace cudaops::detail
