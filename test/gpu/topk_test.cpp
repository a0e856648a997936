// topk on the device against the exact host reference: every dtype, shape class (one tile,
// several tiles, several levels), option and index type through the harness descriptor; then
// ties, NaN and infinities, signed zeros, strided and misaligned rows, many short rows, a
// non-default stream, graph capture, repeatability, a single row of 2^24 and more than 2^31
// elements.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cudaops/topk.h"
#include "harness/cuda_util.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/compare.h"
#include "reference/topk.h"
#include "support/check_descriptor.h"
#include "support/device_fill.h"

namespace cudaops {
namespace {

using harness::DeviceArray;
using harness::DeviceBuffer;
using ref::HostArray;
using ref::RowShape;

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const ref::Tolerance kExact{0.0, 1e-300};

struct Case {
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0, k = 0, pad = 0, offset = 0;
  bool largest = true, sorted = true, index32 = false;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << dtype_name(c.dtype) << " rows=" << c.rows << " cols=" << c.cols << " k=" << c.k
            << " pad=" << c.pad << " offset=" << c.offset << (c.largest ? " largest" : " smallest")
            << (c.sorted ? " sorted" : " unsorted") << (c.index32 ? " int32" : " int64");
}

::testing::AssertionResult CheckCase(const Case& c) {
  harness::CaseConfig config;
  config.dtype = c.dtype;
  config.dims = {{"rows", c.rows},      {"cols", c.cols},       {"k", c.k},
                 {"pad", c.pad},        {"largest", c.largest}, {"sorted", c.sorted},
                 {"index32", c.index32}};
  config.seed = static_cast<uint64_t>(c.rows * 31 + c.cols * 7 + c.k * 13 + c.offset + 1);
  config.offset = c.offset;
  std::ostringstream what;
  what << c;
  return testing::CheckDescriptorCase("topk", config, nullptr, what.str());
}

// ---------------------------------------------------------------------------------------------
// Shapes: one tile per row, several tiles (two levels), several levels; every dtype and option.

class TopkShapes : public ::testing::TestWithParam<Case> {};

TEST_P(TopkShapes, MatchesReference) {
  EXPECT_TRUE(CheckCase(GetParam()));
}

std::vector<Case> ShapeCases() {
  struct Shape {
    int64_t rows, cols, k;
  };
  const Shape shapes[] = {{1, 1, 1},         {7, 1, 1},
                          {3, 7, 7},         {5, 199, 1},
                          {5, 199, 64},      {3, 1000, 999},
                          {2, 4097, 4096},   {33, 127, 32},
                          {4, 16384, 4096},  {3, 16385, 5},
                          {2, 40000, 4096},  {3, 65543, 2048},
                          {2, 100000, 1},    {1, (1 << 20) + 1, 4096},
                          {1, 300000, 777},  {300, 40000, 300},
                          {2, 131072, 4096}, {2, 200003, 3000}};
  std::vector<Case> cases;
  for (DType dtype : kDtypes) {
    for (const Shape& s : shapes) {
      Case c;
      c.dtype = dtype;
      c.rows = s.rows;
      c.cols = s.cols;
      c.k = s.k;
      cases.push_back(c);
      // The other options, a row stride and a misaligned start.
      c.largest = false;
      c.pad = 3;
      cases.push_back(c);
      c.largest = true;
      c.sorted = false;
      c.index32 = true;
      c.offset = 1;
      cases.push_back(c);
      c.largest = false;
      c.pad = 0;
      cases.push_back(c);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, TopkShapes, ::testing::ValuesIn(ShapeCases()));

// ---------------------------------------------------------------------------------------------
// Hand-made data: runs topk on a host matrix and compares with the reference, exactly.

struct Buffers {
  DeviceArray x, values, indices;
  DeviceBuffer workspace;
};

::testing::AssertionResult CheckHost(const HostArray& host, RowShape s, int64_t k,
                                     TopkOptions options, cudaStream_t stream = nullptr,
                                     HostArray* values_out = nullptr) {
  const DType dtype = host.dtype();
  Buffers run;
  size_t bytes = 0;
  Status status = topk_workspace_size(s.rows, s.cols, k, dtype, &bytes);
  if (status.ok()) status = run.x.allocate(dtype, host.size());
  if (status.ok()) status = run.x.upload(host, stream);
  if (status.ok()) status = run.values.allocate(dtype, s.rows * k);
  if (status.ok()) status = run.indices.allocate(options.index_dtype, s.rows * k);
  if (status.ok() && bytes > 0) status = run.workspace.allocate(static_cast<int64_t>(bytes));
  if (status.ok()) status = run.values.poison(stream);
  if (status.ok()) status = run.indices.poison(stream);
  if (status.ok()) {
    status = topk({run.x.data(), s.row_stride}, {run.values.data(), k}, {run.indices.data(), k},
                  s.rows, s.cols, k, dtype, options, run.workspace.get(), bytes, stream);
  }
  HostArray values, indices;
  if (status.ok()) status = run.values.download(&values, stream);
  if (status.ok()) status = run.indices.download(&indices, stream);
  if (!status.ok()) return ::testing::AssertionFailure() << status.to_string();
  const ref::TopkReference want = ref::topk(host, s, k, options.largest, options.sorted);
  const ref::CompareResult ri =
      ref::compare(indices, std::vector<double>(want.indices.begin(), want.indices.end()), kExact);
  if (!ri.ok()) return ::testing::AssertionFailure() << "indices: " << ri.describe();
  const ref::CompareResult rv = ref::compare(values, want.values, kExact);
  if (!rv.ok()) return ::testing::AssertionFailure() << "values: " << rv.describe();
  if (values_out != nullptr) *values_out = values;
  return ::testing::AssertionSuccess();
}

const TopkOptions kAllOptions[] = {{true, true, DType::kInt64},
                                   {false, true, DType::kInt64},
                                   {true, false, DType::kInt32},
                                   {false, false, DType::kInt32}};

class TopkDtype : public ::testing::TestWithParam<DType> {};

// Rows of few distinct values: the k-th key is shared by many columns, so the lower columns must
// win at every level.
TEST_P(TopkDtype, ManyTies) {
  const DType dtype = GetParam();
  for (int64_t cols : {100, 5000, 70000, 131072}) {
    const RowShape s{4, cols, cols};
    HostArray x(dtype, s.rows * cols);
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t r = i / cols;
      // Row 0: all equal; row 1: two values; row 2: eight values; row 3: 256 values.
      const int64_t distinct = r == 0 ? 1 : (r == 1 ? 2 : (r == 2 ? 8 : 256));
      x.set(i, static_cast<double>((i * 7919) % distinct) - 3.0);
    }
    for (int64_t k : {int64_t{1}, int64_t{37}, std::min<int64_t>(cols, 4096)}) {
      for (const TopkOptions& o : kAllOptions) {
        SCOPED_TRACE("cols " + std::to_string(cols) + " k " + std::to_string(k));
        EXPECT_TRUE(CheckHost(x, s, k, o));
      }
    }
  }
}

// Rows of 65 tiles are sampled for a row-wide bound. A ramp puts the row's best in its last
// tile (which no sample sees) and the smallest in its first; a row of three values makes the
// samples' bound pass every key, so that the tiles fall back to their own and fill their slots,
// which the first gathering level then takes in chunks.
TEST_P(TopkDtype, SampledRows) {
  const DType dtype = GetParam();
  const int64_t cols = 64 * kTopkTileCols + 5;
  const RowShape s{3, cols, cols};
  HostArray x(dtype, s.rows * cols);
  for (int64_t i = 0; i < x.size(); ++i) {
    const int64_t r = i / cols, c = i % cols;
    const double ramp = std::ldexp(static_cast<double>(c), -10);
    x.set(i, r == 0 ? ramp : (r == 1 ? -ramp : static_cast<double>((c * 7919) % 3)));
  }
  for (int64_t k : {int64_t{1}, int64_t{100}, int64_t{4096}}) {
    for (const TopkOptions& o : kAllOptions) {
      SCOPED_TRACE("k " + std::to_string(k));
      EXPECT_TRUE(CheckHost(x, s, k, o));
    }
  }
}

// Rows of a few tiles, selected together (a cluster of blocks on sm_90 and newer), whose values
// span many orders of magnitude and both signs: the row-wide bound must be refined beyond its
// first histogram, or take the exact selection.
TEST_P(TopkDtype, SpreadMagnitudes) {
  const DType dtype = GetParam();
  const int most = dtype == DType::kFloat16 ? 14 : 60;  // exponents each dtype holds
  for (int64_t cols : {40000, 65536, 200000}) {
    const RowShape s{3, cols, cols + 8};
    HostArray x(dtype, s.rows * s.row_stride);
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t r = i / s.row_stride;
      const uint64_t h = (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ull;
      const double mantissa = 1.0 + static_cast<double>((h >> 20) % 1024) / 1024.0;
      const int exponent = static_cast<int>((h >> 40) % (2 * most + 1)) - most;
      const double sign = r == 1 || (h >> 63) != 0 ? 1.0 : -1.0;  // row 1: all positive
      x.set(i, sign * std::ldexp(mantissa, r == 2 ? exponent / 8 : exponent));
    }
    for (int64_t k : {int64_t{1}, int64_t{64}, int64_t{1024}, int64_t{4096}}) {
      for (const TopkOptions& o : kAllOptions) {
        SCOPED_TRACE("cols " + std::to_string(cols) + " k " + std::to_string(k));
        EXPECT_TRUE(CheckHost(x, s, k, o));
      }
    }
  }
}

// NaN ranks above every number, then +inf; -inf below every number; -0.0 below +0.0.
TEST_P(TopkDtype, NanInfinitiesAndSignedZeros) {
  const DType dtype = GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t cols : {9, 3000, 50000}) {
    const RowShape s{3, cols, cols + 1};
    HostArray x(dtype, s.rows * s.row_stride);
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c = i % s.row_stride;
      double v = std::ldexp(static_cast<double>((c * 2654435761u) % 1000), -5) - 10.0;
      switch ((c * 31 + i / s.row_stride) % 11) {
        case 0:
          v = nan;
          break;
        case 1:
          v = inf;
          break;
        case 2:
          v = -inf;
          break;
        case 3:
          v = 0.0;
          break;
        case 4:
          v = -0.0;
          break;
        default:
          break;
      }
      x.set(i, v);
    }
    for (int64_t k : {int64_t{1}, int64_t{5}, std::min<int64_t>(cols, 4096)}) {
      for (const TopkOptions& o : kAllOptions) {
        SCOPED_TRACE("cols " + std::to_string(cols) + " k " + std::to_string(k));
        EXPECT_TRUE(CheckHost(x, s, k, o));
      }
    }
  }
  // Signed zeros: the values come back with their sign.
  const RowShape s{1, 4, 4};
  HostArray x(dtype, 4);
  x.set(0, -0.0);
  x.set(1, 0.0);
  x.set(2, -0.0);
  x.set(3, 0.0);
  HostArray values;
  ASSERT_TRUE(CheckHost(x, s, 2, {true, true, DType::kInt64}, nullptr, &values));
  EXPECT_FALSE(std::signbit(values.get(0)));
  EXPECT_FALSE(std::signbit(values.get(1)));
  ASSERT_TRUE(CheckHost(x, s, 2, {false, true, DType::kInt64}, nullptr, &values));
  EXPECT_TRUE(std::signbit(values.get(0)));
  EXPECT_TRUE(std::signbit(values.get(1)));
}

// Many short rows, including rows shorter than a warp.
TEST_P(TopkDtype, ManyShortRows) {
  const DType dtype = GetParam();
  for (int64_t cols : {1, 3, 40}) {
    const RowShape s{20011, cols, cols};
    HostArray x(dtype, s.rows * cols);
    ref::fill_random(x, 77 + cols);
    for (int64_t k : {int64_t{1}, cols}) {
      SCOPED_TRACE("cols " + std::to_string(cols) + " k " + std::to_string(k));
      EXPECT_TRUE(CheckHost(x, s, k, {true, true, DType::kInt64}));
      EXPECT_TRUE(CheckHost(x, s, k, {false, false, DType::kInt32}));
    }
  }
}

TEST_P(TopkDtype, NonDefaultStreamAndRepeatable) {
  const DType dtype = GetParam();
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  const RowShape s{5, 123457, 123457};
  HostArray x(dtype, s.rows * s.cols);
  ref::fill_random(x, 5);
  HostArray first, second;
  ASSERT_TRUE(CheckHost(x, s, 1500, {true, true, DType::kInt64}, stream.get(), &first));
  ASSERT_TRUE(CheckHost(x, s, 1500, {true, true, DType::kInt64}, stream.get(), &second));
  ASSERT_EQ(first.size_bytes(), second.size_bytes());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), static_cast<size_t>(first.size_bytes())), 0);
}

TEST_P(TopkDtype, GraphCapture) {
  const DType dtype = GetParam();
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  // One launch (one tile, or a cluster of tiles per row), levels, and a sampled row (whose
  // later launches depend on the earlier ones programmatically on sm_90 and newer).
  const std::pair<int64_t, int64_t> shapes[] = {
      {6, 4000}, {6, 90000}, {200, 40000}, {2, 64 * kTopkTileCols + 5}};
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    const RowShape s{rows, cols, cols};
    const int64_t k = 300;
    HostArray host(dtype, s.rows * cols);
    ref::fill_random(host, 9);
    Buffers run;
    size_t bytes = 0;
    ASSERT_TRUE(topk_workspace_size(s.rows, cols, k, dtype, &bytes).ok());
    ASSERT_TRUE(run.x.allocate(dtype, host.size()).ok());
    ASSERT_TRUE(run.values.allocate(dtype, s.rows * k).ok());
    ASSERT_TRUE(run.indices.allocate(DType::kInt64, s.rows * k).ok());
    if (bytes > 0) {
      ASSERT_TRUE(run.workspace.allocate(static_cast<int64_t>(bytes)).ok());
    }
    ASSERT_TRUE(run.values.poison(stream.get()).ok());
    ASSERT_TRUE(run.indices.poison(stream.get()).ok());
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status status =
        topk({run.x.data(), cols}, {run.values.data(), k}, {run.indices.data(), k}, s.rows, cols, k,
             dtype, TopkOptions{}, run.workspace.get(), bytes, stream.get());
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    ASSERT_TRUE(status.ok()) << status.to_string();
    // The input is uploaded after capture: the graph reads it when launched.
    ASSERT_TRUE(run.x.upload(host, stream.get()).ok());
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    HostArray values, indices;
    ASSERT_TRUE(run.values.download(&values, stream.get()).ok());
    ASSERT_TRUE(run.indices.download(&indices, stream.get()).ok());
    const ref::TopkReference want = ref::topk(host, s, k, true, true);
    EXPECT_TRUE(ref::compare(values, want.values, kExact).ok());
    EXPECT_TRUE(
        ref::compare(indices, std::vector<double>(want.indices.begin(), want.indices.end()), kExact)
            .ok());
  }
}

// Device pointers the checks must refuse before launching anything.
TEST_P(TopkDtype, BadDeviceArguments) {
  const DType dtype = GetParam();
  DeviceArray x, values, indices;
  ASSERT_TRUE(x.allocate(dtype, 4 * 100000).ok());
  ASSERT_TRUE(values.allocate(dtype, 4 * 8).ok());
  ASSERT_TRUE(indices.allocate(DType::kInt64, 4 * 8).ok());
  size_t bytes = 0;
  ASSERT_TRUE(topk_workspace_size(4, 100000, 8, dtype, &bytes).ok());
  ASSERT_GT(bytes, 0u);
  DeviceBuffer workspace;
  ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
  Status s = topk({x.data(), 100000}, {values.data(), 8}, {indices.data(), 8}, 4, 100000, 8, dtype,
                  TopkOptions{}, workspace.get(), bytes - 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kWorkspaceTooSmall) << s.to_string();
  s = topk({x.data(), 100000}, {values.data(), 8}, {indices.data(), 8}, 4, 100000, 8, dtype,
           TopkOptions{}, static_cast<char*>(workspace.get()) + 8, bytes, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kMisaligned) << s.to_string();
  s = topk({x.data(), 100000}, {values.data(), 8}, {static_cast<char*>(indices.data()) + 4, 8}, 4,
           100000, 8, dtype, TopkOptions{}, workspace.get(), bytes, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kMisaligned) << s.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(All, TopkDtype, ::testing::ValuesIn(kDtypes),
                         [](const ::testing::TestParamInfo<DType>& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Large: a single row of 2^24, and more than 2^31 elements (sampled rows checked).

HostArray HashedRow(DType dtype, int64_t cols, uint64_t seed, int64_t first) {
  HostArray row(dtype, cols);
  for (int64_t c = 0; c < cols; ++c)
    row.set(c, testing::hashed_value(seed, first + c));
  return row;
}

TEST(TopkHuge, SingleRowOf2To24) {
  const int64_t cols = kTopkMaxCols;
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceArray x;
    ASSERT_TRUE(x.allocate(dtype, cols).ok());
    ASSERT_TRUE(testing::fill_hashed(x.data(), dtype, cols, 3, nullptr).ok());
    const HostArray host = HashedRow(dtype, cols, 3, 0);
    for (int64_t k : {int64_t{1024}, int64_t{4096}}) {
      for (const TopkOptions& o : kAllOptions) {
        DeviceArray values, indices;
        ASSERT_TRUE(values.allocate(dtype, k).ok());
        ASSERT_TRUE(indices.allocate(o.index_dtype, k).ok());
        size_t bytes = 0;
        ASSERT_TRUE(topk_workspace_size(1, cols, k, dtype, &bytes).ok());
        DeviceBuffer workspace;
        ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
        ASSERT_TRUE(values.poison(nullptr).ok());
        ASSERT_TRUE(topk({x.data(), cols}, {values.data(), k}, {indices.data(), k}, 1, cols, k,
                         dtype, o, workspace.get(), bytes, nullptr)
                        .ok());
        HostArray got_values, got_indices;
        ASSERT_TRUE(values.download(&got_values, nullptr).ok());
        ASSERT_TRUE(indices.download(&got_indices, nullptr).ok());
        const ref::TopkReference want = ref::topk(host, {1, cols, cols}, k, o.largest, o.sorted);
        EXPECT_TRUE(ref::compare(got_values, want.values, kExact).ok()) << "k " << k;
        EXPECT_TRUE(ref::compare(got_indices,
                                 std::vector<double>(want.indices.begin(), want.indices.end()),
                                 kExact)
                        .ok())
            << "k " << k;
      }
    }
  }
}

TEST(TopkHuge, BeyondTwoToThe31Elements) {
  const DType dtype = DType::kFloat16;
  for (int64_t cols : {int64_t{4096}, int64_t{100000}}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = (int64_t{1} << 31) / cols + 3;
    const int64_t n = rows * cols;
    const int64_t k = 64;
    size_t free_bytes = 0, total_bytes = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
    size_t bytes = 0;
    ASSERT_TRUE(topk_workspace_size(rows, cols, k, dtype, &bytes).ok());
    if (static_cast<int64_t>(free_bytes) < n * 2 + static_cast<int64_t>(bytes) + (1 << 30)) {
      GTEST_SKIP() << "needs " << (n * 2 + static_cast<int64_t>(bytes)) / (1 << 20)
                   << " MiB of device memory";
    }
    DeviceArray x, values, indices;
    DeviceBuffer workspace;
    ASSERT_TRUE(x.allocate(dtype, n).ok());
    ASSERT_TRUE(values.allocate(dtype, rows * k).ok());
    ASSERT_TRUE(indices.allocate(DType::kInt32, rows * k).ok());
    if (bytes > 0) {
      ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
    }
    ASSERT_TRUE(testing::fill_hashed(x.data(), dtype, n, 21, nullptr).ok());
    ASSERT_TRUE(values.poison(nullptr).ok());
    const TopkOptions options{false, true, DType::kInt32};
    ASSERT_TRUE(topk({x.data(), cols}, {values.data(), k}, {indices.data(), k}, rows, cols, k,
                     dtype, options, workspace.get(), bytes, nullptr)
                    .ok());
    HostArray got_values, got_indices;
    ASSERT_TRUE(values.download(&got_values, nullptr).ok());
    ASSERT_TRUE(indices.download(&got_indices, nullptr).ok());
    for (int64_t r : {int64_t{0}, rows / 2, rows - 2, rows - 1}) {
      const HostArray row = HashedRow(dtype, cols, 21, r * cols);
      const ref::TopkReference want = ref::topk(row, {1, cols, cols}, k, false, true);
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(got_indices.get(r * k + j), static_cast<double>(want.indices[j]))
            << "row " << r << " rank " << j;
        ASSERT_EQ(got_values.get(r * k + j), want.values[j]) << "row " << r << " rank " << j;
      }
    }
  }
}

}  // namespace
}  // namespace cudaops
