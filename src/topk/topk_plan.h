#pragma once

// How a top-k problem is cut into tiles: level 0 selects from tiles of the rows themselves;
// each further level selects from the (key, column) pairs the previous one left, until one tile
// per row remains. Host-only, so that the workspace size needs no GPU.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cudaops/topk.h"

namespace cudaops::detail::topk {

constexpr int64_t kValueTile = kTopkTileCols;  // values per tile (64 KiB of keys)
constexpr int64_t kPairTile = 8192;            // pairs per tile (64 KiB of keys and columns)

struct Level {
  int64_t n = 0;  // elements (level 0) or pairs per row
  int tile = 0;   // per thread block; a multiple of 8 (16-byte aligned tiles) unless one per row
  int tiles = 0;  // per row
  int k = 0;
};

// One of two ping-pong buffers of pairs in the workspace: keys then columns.
struct Buffer {
  size_t keys_offset = 0;
  size_t columns_offset = 0;
};

struct Plan {
  std::vector<Level> levels;
  Buffer buffers[2];
  size_t workspace_bytes = 0;
};

inline Level plan_level(int64_t n, int64_t cap, int64_t k) {
  Level level;
  level.n = n;
  level.k = static_cast<int>(k);
  if (n <= cap) {
    level.tile = static_cast<int>(n);
    level.tiles = 1;
    return level;
  }
  // Balanced tiles, each a multiple of 8 elements so that every tile starts 16-byte aligned
  // when the row does.
  const int64_t count = (n + cap - 1) / cap;
  int64_t tile = (n + count - 1) / count;
  tile = (tile + 7) / 8 * 8;
  level.tile = static_cast<int>(tile);
  level.tiles = static_cast<int>((n + tile - 1) / tile);
  return level;
}

/// Requires rows >= 0, 1 <= k <= cols.
inline Plan make_plan(int64_t rows, int64_t cols, int64_t k) {
  Plan plan;
  plan.levels.push_back(plan_level(cols, kValueTile, k));
  while (plan.levels.back().tiles > 1) {
    const Level& previous = plan.levels.back();
    plan.levels.push_back(plan_level(int64_t{previous.tiles} * k, kPairTile, k));
  }
  // Level i (all but the last) writes rows * tiles * k pairs into buffer i % 2.
  size_t pairs[2] = {0, 0};
  for (size_t i = 0; i + 1 < plan.levels.size(); ++i) {
    const size_t count = static_cast<size_t>(rows) * plan.levels[i].tiles * static_cast<size_t>(k);
    if (count > pairs[i % 2]) pairs[i % 2] = count;
  }
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  size_t offset = 0;
  for (int b = 0; b < 2; ++b) {
    plan.buffers[b].keys_offset = offset;
    offset += aligned(pairs[b] * 4);
    plan.buffers[b].columns_offset = offset;
    offset += aligned(pairs[b] * 4);
  }
  plan.workspace_bytes = offset;
  return plan;
}

/// Launches the levels of `plan` (made for rows, cols and k of this call).
Status run(const char* op, const Plan& plan, ConstMatrixRef x, MatrixRef values, MatrixRef indices,
           int64_t rows, DType dtype, const TopkOptions& options, void* workspace,
           cudaStream_t stream);

}  // namespace cudaops::detail::topk
