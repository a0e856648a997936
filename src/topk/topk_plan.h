#pragma once

// How a top-k problem is cut into tiles. Level 0 reads tiles of a row; each further level
// gathers the candidates several tiles of the previous one left, until one block per row remains,
// which selects the row's k. A tile that is not the last of its row leaves at most slot(k) items
// (key, column) in its slot of the workspace, with their count. Host-only, so that the workspace
// size needs no GPU.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/workspace.h"
#include "cudaops/topk.h"

namespace cudaops::detail::topk {

constexpr int64_t kValueTile = kTopkTileCols;  // values per tile
constexpr int64_t kGatherItems = 16384;        // slot items gathered by one block (128 KiB)
constexpr int64_t kGatherLists = 128;          // slots gathered by one block, at most
// Rows of at least kSampleFrom tiles are sampled first: a few of their tiles each find a bound
// of their sample_k-th key, and the least of those bounds is a bound of the row's k-th key
// (samples * sample_k >= k keys are at or above it) that every tile of the row applies. Most
// tiles then leave few candidates, and the first gathering level takes kGatherLists slots per
// block (one block for all of a long row's slots was slower: docs/tuning/topk.md).
constexpr int64_t kSampleFrom = 64;
constexpr int64_t kSampleTiles = 64;  // tiles sampled per row, at most

inline int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n)
    p <<= 1;
  return p;
}

/// Items a tile may leave for the next level: all that pass its bound up to this many, else
/// exactly its best k.
inline int64_t slot_items(int64_t k) {
  return 2 * next_pow2(k);
}

struct Level {
  int64_t n = 0;     // values (level 0) or slot positions (later levels) per row
  int tile = 0;      // values per block (level 0); slot positions per block, lists * slot
  int tiles = 0;     // blocks per row
  int lists = 0;     // later levels: slots of the previous level gathered per block, a power of two
  int capacity = 0;  // later levels: items a block holds at once (more come in chunks)
  int k = 0;
};

// One of two ping-pong buffers in the workspace: the slots' items (8 bytes each), then their
// counts (4 bytes each).
struct Buffer {
  size_t items_offset = 0;
  size_t counts_offset = 0;
};

struct Plan {
  std::vector<Level> levels;
  Buffer buffers[2];
  int samples = 0;           // tiles sampled per row (0: none)
  int sample_k = 0;          // keys each sampled tile's bound stands for: samples * sample_k >= k
  size_t bounds_offset = 0;  // the samples' bounds: rows * samples, 4 bytes each
  size_t workspace_bytes = 0;
};

inline Level plan_values(int64_t n, int64_t k) {
  Level level;
  level.n = n;
  level.k = static_cast<int>(k);
  if (n <= kValueTile) {
    level.tile = static_cast<int>(n);
    level.tiles = 1;
    return level;
  }
  // Balanced tiles, each a multiple of 8 values so that every tile starts 16-byte aligned when
  // the row does.
  const int64_t count = (n + kValueTile - 1) / kValueTile;
  int64_t tile = (n + count - 1) / count;
  tile = (tile + 7) / 8 * 8;
  level.tile = static_cast<int>(tile);
  level.tiles = static_cast<int>((n + tile - 1) / tile);
  return level;
}

// Gathering the slots of `lists` tiles per row. Dense slots (about k items each) are gathered
// as many per block as kGatherItems holds; sparse ones (after a sampled level 0) kGatherLists// per
// block, in chunks of kGatherItems should they hold more.
inline Level plan_gather(int64_t lists, int64_t k, bool sparse) {
  Level level;
  const int64_t slot = slot_items(k);
  level.n = lists * slot;
  level.k = static_cast<int>(k);
  const int64_t most = sparse ? kGatherLists : std::min(kGatherItems / slot, kGatherLists);
  level.lists = static_cast<int>(lists <= most ? next_pow2(lists) : most);  // >= 4 when dense
  level.tiles = static_cast<int>((lists + level.lists - 1) / level.lists);
  level.tile = static_cast<int>(level.lists * slot);
  level.capacity = static_cast<int>(std::min<int64_t>(level.tile, kGatherItems));
  return level;
}

/// Requires rows >= 0, 1 <= k <= min(cols, kTopkMaxK).
inline Plan make_plan(int64_t rows, int64_t cols, int64_t k) {
  Plan plan;
  plan.levels.push_back(plan_values(cols, k));
  const int64_t tiles = plan.levels.front().tiles;
  if (tiles >= kSampleFrom) {
    plan.samples = static_cast<int>(std::min(kSampleTiles, tiles / 4));
    plan.sample_k = static_cast<int>((k + plan.samples - 1) / plan.samples);
  }
  bool sparse = plan.samples > 0;
  while (plan.levels.back().tiles > 1) {
    plan.levels.push_back(plan_gather(plan.levels.back().tiles, k, sparse));
    sparse = false;
  }
  // Level i (all but the last) fills rows * tiles slots in buffer i % 2.
  size_t slots[2] = {0, 0};
  for (size_t i = 0; i + 1 < plan.levels.size(); ++i) {
    const size_t count = static_cast<size_t>(rows) * plan.levels[i].tiles;
    if (count > slots[i % 2]) slots[i % 2] = count;
  }
  const int64_t slot = slot_items(k);
  WorkspaceCarver w;
  for (int b = 0; b < 2; ++b) {
    const auto count = static_cast<int64_t>(slots[b]);
    plan.buffers[b].items_offset = w.add({count, slot, 8});
    plan.buffers[b].counts_offset = w.add({count, 4});
  }
  plan.bounds_offset = w.add({rows, plan.samples, 4});
  plan.workspace_bytes = w.overflow() ? std::numeric_limits<size_t>::max() : w.bytes();
  return plan;
}

/// Launches the levels of `plan` (made for rows, cols and k of this call) over rows of T; built
/// one dtype per translation unit (topk_<dtype>.cu).
template <typename T>
Status run_typed(const char* op, const Plan& plan, ConstMatrixRef x, MatrixRef values,
                 MatrixRef indices, int64_t rows, const TopkOptions& options, void* workspace,
                 cudaStream_t stream);

}  // namespace cudaops::detail::topk
