// topk without a GPU: argument validation (every GPU hidden: each bad argument must be reported
// by name before anything reaches the device), the workspace plan and the host reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "cudaops/topk.h"
#include "harness/cuda_util.h"
#include "reference/topk.h"
#include "status_assertions.h"
#include "topk/topk_plan.h"

namespace cudaops {
namespace {

using testing::FailsWith;
using testing::fake;

// Far enough apart that no test's arrays overlap (overlap is an error of its own).
void* const kX = fake(uintptr_t{1} << 40);
void* const kV = fake(uintptr_t{2} << 40);
void* const kI = fake(uintptr_t{3} << 40);
void* const kWork = fake(uintptr_t{4} << 40);
constexpr DType kF32 = DType::kFloat32;
const TopkOptions kDefault{};

Status Call(int64_t rows, int64_t cols, int64_t k, TopkOptions o = kDefault, DType dtype = kF32,
            const void* x = kX, void* values = kV, void* indices = kI, void* work = kWork,
            size_t bytes = size_t{1} << 40, int64_t x_stride = -1) {
  return topk({x, x_stride < 0 ? cols : x_stride}, {values, k}, {indices, k}, rows, cols, k, dtype,
              o, work, bytes, nullptr);
}

TEST(TopkValidation, SizesAndK) {
  EXPECT_TRUE(FailsWith(Call(-1, 8, 2), StatusCode::kInvalidArgument, {"topk", "rows", "-1"}));
  EXPECT_TRUE(FailsWith(Call(4, -8, 2), StatusCode::kInvalidArgument, {"topk", "cols"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 0), StatusCode::kInvalidArgument, {"topk", "k", "[1, 4096]"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, -3), StatusCode::kInvalidArgument, {"topk", "k"}));
  EXPECT_TRUE(
      FailsWith(Call(4, 8, 9), StatusCode::kInvalidArgument, {"topk", "k (9)", "cols (8)"}));
  EXPECT_TRUE(FailsWith(Call(4, 100000, 4097), StatusCode::kInvalidArgument, {"topk", "4096"}));
  EXPECT_TRUE(FailsWith(Call(1, (int64_t{1} << 24) + 1, 4), StatusCode::kInvalidArgument,
                        {"topk", "cols", "2^24"}));
  EXPECT_TRUE(
      FailsWith(Call(4, 0, 1), StatusCode::kInvalidArgument, {"topk", "k (1)", "cols (0)"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, kF32, kX, kV, kI, kWork, 0, 7),
                        StatusCode::kInvalidArgument, {"topk", "x", "row_stride"}));
  EXPECT_TRUE(
      FailsWith(topk({kX, 8}, {kV, 1}, {kI, 2}, 4, 8, 2, kF32, kDefault, nullptr, 0, nullptr),
                StatusCode::kInvalidArgument, {"topk", "values", "row_stride"}));
  EXPECT_TRUE(FailsWith(Call(16, 8, 2, kDefault, kF32, kX, kV, kI, kWork, 0, int64_t{1} << 62),
                        StatusCode::kInvalidArgument, {"topk", "x", "2^63"}));
}

static_assert(std::is_aggregate_v<TopkArgs> && std::is_aggregate_v<TopkOptions>);

TEST(TopkValidation, ArgumentStruct) {
  TopkArgs args{{kX, 8}, {kV, 2}, {kI, 2}, 2};
  size_t bytes = 1;
  EXPECT_TRUE(topk_workspace_size({4, 8, kF32}, 2, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  args.k = 9;
  EXPECT_TRUE(FailsWith(topk(args, {4, 8, kF32}, {}, nullptr), StatusCode::kInvalidArgument,
                        {"topk", "k (9)", "cols (8)"}));
  args.k = 2;
  args.options.index_dtype = DType::kFloat16;
  EXPECT_TRUE(
      FailsWith(topk(args, {4, 8, kF32}, {}, nullptr), StatusCode::kUnsupportedDtype, {"topk"}));
}

TEST(TopkValidation, OutputsMustNotOverlap) {
  auto* x = static_cast<char*>(kX);
  EXPECT_TRUE(FailsWith(Call(4, 100, 8, kDefault, kF32, x, x + 64), StatusCode::kInvalidArgument,
                        {"topk", "x", "values", "overlap"}));
  EXPECT_TRUE(FailsWith(Call(4, 100, 8, kDefault, kF32, kX, kV, kV), StatusCode::kInvalidArgument,
                        {"topk", "values", "indices"}));
  EXPECT_TRUE(FailsWith(Call(4, 100000, 16, kDefault, kF32, kX, kV, kI, kV),
                        StatusCode::kInvalidArgument, {"topk", "values", "d_workspace"}));
}

TEST(TopkValidation, WorkspaceQueryRefusesWhatWouldWrap) {
  size_t bytes = 0;
  EXPECT_TRUE(FailsWith(topk_workspace_size(int64_t{1} << 40, int64_t{1} << 24, 2048, kF32, &bytes),
                        StatusCode::kInvalidArgument, {"topk", "workspace", "2^62"}));
  EXPECT_TRUE(FailsWith(topk_workspace_size(INT64_MAX, 65536, 32, kF32, &bytes),
                        StatusCode::kInvalidArgument, {"topk", "rows"}));
  // Large but representable: a size, not an error.
  ASSERT_TRUE(topk_workspace_size(int64_t{1} << 24, 65536, 1024, kF32, &bytes).ok());
  EXPECT_GT(bytes, size_t{1} << 24);
}

TEST(TopkValidation, PointersDtypesAndWorkspace) {
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, kF32, nullptr), StatusCode::kInvalidArgument,
                        {"topk", "x", "null"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, kF32, kX, nullptr), StatusCode::kInvalidArgument,
                        {"topk", "values", "null"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, kF32, kX, kV, nullptr),
                        StatusCode::kInvalidArgument, {"topk", "indices", "null"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, kF32, fake(0x100002)), StatusCode::kMisaligned,
                        {"topk", "x", "aligned"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, kF32, kX, kV, fake(0x300004)),
                        StatusCode::kMisaligned, {"topk", "indices", "int64"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, kDefault, DType::kInt32), StatusCode::kUnsupportedDtype,
                        {"topk", "dtype", "int32"}));
  EXPECT_TRUE(FailsWith(Call(4, 8, 2, {true, true, DType::kFloat32}), StatusCode::kUnsupportedDtype,
                        {"topk", "index_dtype", "float32"}));
  size_t bytes = 0;
  ASSERT_TRUE(topk_workspace_size(4, 100000, 16, kF32, &bytes).ok());
  EXPECT_GT(bytes, 0u);
  EXPECT_TRUE(FailsWith(Call(4, 100000, 16, kDefault, kF32, kX, kV, kI, kWork, bytes - 1),
                        StatusCode::kWorkspaceTooSmall, {"topk", "workspace_bytes"}));
  EXPECT_TRUE(FailsWith(Call(4, 100000, 16, kDefault, kF32, kX, kV, kI, nullptr, bytes),
                        StatusCode::kInvalidArgument, {"topk", "d_workspace", "null"}));
  EXPECT_TRUE(FailsWith(
      Call(4, 100000, 16, kDefault, kF32, kX, kV, kI, fake((uintptr_t{4} << 40) + 8), bytes),
      StatusCode::kMisaligned, {"topk", "d_workspace", "16"}));
  EXPECT_TRUE(FailsWith(topk_workspace_size(4, 8, 2, kF32, nullptr), StatusCode::kInvalidArgument,
                        {"topk", "bytes"}));
  EXPECT_TRUE(FailsWith(topk_workspace_size(4, 8, 9, kF32, &bytes), StatusCode::kInvalidArgument,
                        {"topk", "k"}));
  // Nothing to do: no rows (with null pointers), and rows that fit one tile need no workspace.
  EXPECT_TRUE(Call(0, 8, 2, kDefault, kF32, nullptr, nullptr, nullptr, nullptr, 0).ok());
  ASSERT_TRUE(topk_workspace_size(1000, kTopkTileCols, 2048, kF32, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}

TEST(TopkPlan, LevelsShrinkToOneTile) {
  for (int64_t cols : {int64_t{1}, int64_t{16384}, int64_t{16385}, int64_t{65536}, int64_t{1} << 20,
                       kTopkMaxCols}) {
    for (int64_t k : {int64_t{1}, int64_t{64}, int64_t{1024}, int64_t{2048}, int64_t{4096}}) {
      if (k > cols) continue;
      const detail::topk::Plan plan = detail::topk::make_plan(3, cols, k);
      SCOPED_TRACE("cols " + std::to_string(cols) + " k " + std::to_string(k));
      ASSERT_FALSE(plan.levels.empty());
      EXPECT_EQ(plan.levels.back().tiles, 1);
      EXPECT_EQ(plan.levels.front().n, cols);
      for (size_t i = 0; i < plan.levels.size(); ++i) {
        const detail::topk::Level& level = plan.levels[i];
        if (i == 0) {
          EXPECT_LE(level.tile, detail::topk::kValueTile);
          EXPECT_GE(int64_t{level.tile} * level.tiles, level.n);
          EXPECT_LT(int64_t{level.tile} * (level.tiles - 1), level.n);  // no empty tile
          if (level.tiles > 1) {
            EXPECT_EQ(level.tile % 8, 0);
          }
        } else {
          // Every slot of the previous level gathered once; slots per block a power of two,
          // dense ones (all but those of a sampled level 0) as many as fit the block, and
          // chunks of at least two slots.
          const int64_t lists = plan.levels[i - 1].tiles;
          const int64_t slot = detail::topk::slot_items(k);
          const bool sparse = i == 1 && plan.samples > 0;
          EXPECT_EQ(level.n, lists * slot);
          EXPECT_EQ(level.lists & (level.lists - 1), 0);
          EXPECT_GE(level.lists, 2);
          if (!sparse) {
            EXPECT_LE(level.lists * slot, detail::topk::kGatherItems);
          }
          EXPECT_LE(level.lists, detail::topk::kGatherLists);
          EXPECT_EQ(level.tile, level.lists * slot);
          EXPECT_EQ(level.capacity, std::min<int64_t>(level.tile, detail::topk::kGatherItems));
          EXPECT_GE(level.capacity, 2 * slot);
          EXPECT_GE(int64_t{level.lists} * level.tiles, lists);
          EXPECT_LT(int64_t{level.lists} * (level.tiles - 1), lists);
        }
      }
      // Rows of many tiles are sampled: samples * sample_k >= k keys stand behind the row's
      // bound, and each sample is a whole tile with more than sample_k values.
      const detail::topk::Level& values = plan.levels.front();
      EXPECT_EQ(plan.samples > 0, values.tiles >= detail::topk::kSampleFrom);
      if (plan.samples > 0) {
        EXPECT_LE(plan.samples, values.tiles);
        EXPECT_LE(plan.samples, detail::topk::kSampleTiles);
        EXPECT_GE(int64_t{plan.samples} * plan.sample_k, k);
        EXPECT_LT(plan.sample_k, values.n - int64_t{values.tile} * (values.tiles - 1));
        EXPECT_GE(plan.workspace_bytes - plan.bounds_offset, 3u * plan.samples * 4);
      }
      EXPECT_EQ(plan.workspace_bytes == 0, plan.levels.size() == 1);
    }
  }
  // The largest row: 1024 tiles of 16384 values, sampled; their sparse slots gathered 128 per
  // block into 8, whose slots of 4096 are gathered four per block into 2, and then 1.
  const detail::topk::Plan largest = detail::topk::make_plan(1, kTopkMaxCols, 2048);
  ASSERT_EQ(largest.levels.size(), 4u);
  EXPECT_EQ(largest.samples, 64);
  EXPECT_EQ(largest.levels[1].tiles, 8);
  EXPECT_EQ(largest.levels[2].tiles, 2);
}

TEST(TopkReference, OrderTiesNanAndZeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  ref::HostArray x(kF32, 8);
  const double data[8] = {1.0, nan, -inf, 0.0, -0.0, inf, 1.0, nan};
  for (int i = 0; i < 8; ++i)
    x.set(i, data[i]);
  const ref::RowShape s{1, 8, 8};
  ref::TopkReference largest = ref::topk(x, s, 8, true, true);
  EXPECT_EQ(largest.indices, (std::vector<int64_t>{1, 7, 5, 0, 6, 3, 4, 2}));
  ref::TopkReference smallest = ref::topk(x, s, 8, false, true);
  EXPECT_EQ(smallest.indices, (std::vector<int64_t>{2, 4, 3, 0, 6, 5, 1, 7}));
  ref::TopkReference unsorted = ref::topk(x, s, 3, true, false);
  EXPECT_EQ(unsorted.indices, (std::vector<int64_t>{1, 5, 7}));
  EXPECT_TRUE(std::isnan(unsorted.values[0]));
  EXPECT_EQ(unsorted.values[1], inf);
  ref::TopkReference two = ref::topk(x, s, 2, false, false);
  EXPECT_EQ(two.indices, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(std::signbit(two.values[1]));
}

}  // namespace
}  // namespace cudaops
