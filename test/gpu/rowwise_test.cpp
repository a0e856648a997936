// The row-wise ops on the device against the double-precision references: every op, dtype and
// row length through the harness descriptors (strided and misaligned too), then in place,
// determinism, graph capture, special values, bad device arguments and more than 2^31 elements.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cudaops/rowwise.h"
#include "harness/cuda_util.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/compare.h"
#include "reference/rowwise.h"
#include "support/check_descriptor.h"
#include "support/device_fill.h"

namespace cudaops {
namespace {

using harness::DeviceArray;
using harness::DeviceBuffer;
using ref::HostArray;
using ref::RowShape;
using R = ref::RowwiseResult;

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const char* const kOps[] = {
    "softmax",  "softmax_backward",  "layer_norm",        "layer_norm_backward",
    "rms_norm", "rms_norm_backward", "fused_add_rms_norm"};

struct Case {
  std::string op;
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t pad = 0;
  int64_t offset = 0;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.op << " " << dtype_name(c.dtype) << " rows=" << c.rows << " cols=" << c.cols
            << " pad=" << c.pad << " offset=" << c.offset;
}

::testing::AssertionResult CheckCase(const Case& c, cudaStream_t stream) {
  harness::CaseConfig config;
  config.dtype = c.dtype;
  config.dims = {{"rows", c.rows}, {"cols", c.cols}, {"pad", c.pad}};
  config.seed = static_cast<uint64_t>(c.rows * 31 + c.cols * 7 + c.pad + c.offset * 3 + 1);
  config.offset = c.offset;
  std::ostringstream what;
  what << c;
  return testing::CheckDescriptorCase(c.op, config, stream, what.str());
}

// ---------------------------------------------------------------------------------------------
// Every op, dtype and row length: cached and streamed kernels, vector and scalar paths.

class RowwiseShapes : public ::testing::TestWithParam<Case> {};

TEST_P(RowwiseShapes, MatchesReference) {
  EXPECT_TRUE(CheckCase(GetParam(), nullptr));
}

std::vector<Case> ShapeCases() {
  std::vector<Case> cases;
  struct Shape {
    int64_t rows, cols;
  };
  // 12288 and 10000: the layer norm's split rows of 3 parts (16-bit) or 6 and 5 (float32, two rows
  // at once per cluster; odd rows leave the last cluster's second row empty), the last part of
  // 10000 partly filled.
  const Shape shapes[] = {{37, 1},     {37, 3},    {37, 127},  {37, 199},   {37, 1000},
                          {19, 4096},  {19, 4097}, {9, 16384}, {5, 32768},  {3, 65536},
                          {3, 262144}, {0, 100},   {5, 0},     {3001, 199}, {263, 4096},
                          {11, 12288}, {13, 10000}};
  for (const char* op : kOps) {
    for (DType dtype : kDtypes) {
      for (const Shape& s : shapes) {
        cases.push_back({op, dtype, s.rows, s.cols, 0, 0});
        // A row stride past cols (misaligned unless pad keeps 16 bytes), and misaligned pointers.
        if (s.rows > 1 && (s.cols == 3 || s.cols == 199 || s.cols == 4097 || s.cols == 32768 ||
                           s.cols == 12288)) {
          cases.push_back({op, dtype, s.rows, s.cols, 5, 0});
          cases.push_back({op, dtype, s.rows, s.cols, 16, 0});
          cases.push_back({op, dtype, s.rows, s.cols, 0, 1});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RowwiseShapes, ::testing::ValuesIn(ShapeCases()));

// Rows that fill a cached kernel's tile exactly (threads x chunks x the elements of 16 bytes:
// 128 to 8192 columns, from one warp of one chunk to 256 threads of four), which take the loop
// with no check against the row's end, with and without a row stride past cols; and 8 columns
// fewer (rows still 16-byte aligned), which take the checked loop of the same kernel.
class RowwiseFullTiles : public ::testing::TestWithParam<Case> {};

TEST_P(RowwiseFullTiles, MatchesReference) {
  EXPECT_TRUE(CheckCase(GetParam(), nullptr));
}

std::vector<Case> FullTileCases() {
  std::vector<Case> cases;
  for (const char* op : kOps) {
    for (DType dtype : kDtypes) {
      for (int64_t cols : {128, 256, 512, 1024, 2048, 4096, 8192}) {
        cases.push_back({op, dtype, 37, cols, 0, 0});
        cases.push_back({op, dtype, 37, cols, 16, 0});
        cases.push_back({op, dtype, 37, cols - 8, 0, 0});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RowwiseFullTiles, ::testing::ValuesIn(FullTileCases()));

// Long rows on many more rows than the grid has blocks, so that every stage of the pipelined
// kernels (sm_90 and newer) is reused, with a row stride past cols.
class RowwiseManyLongRows : public ::testing::TestWithParam<Case> {};

TEST_P(RowwiseManyLongRows, MatchesReference) {
  EXPECT_TRUE(CheckCase(GetParam(), nullptr));
}

// The layer norm and the norm backward passes split rows over clusters of 9 to 16 blocks
// (non-portable cluster sizes, where the device allows them) above 8 blocks' columns: 16384
// float32, 32768 16-bit.
bool NeedsLargeClusters(const Case& c) {
  const bool norm =
      c.op == "layer_norm" || c.op == "layer_norm_backward" || c.op == "rms_norm_backward";
  const int64_t part_cols = 128 * 4 * (16 / static_cast<int64_t>(dtype_size(c.dtype)));
  return norm && c.cols > 8 * part_cols && c.cols <= 16 * part_cols;
}

std::vector<Case> LongRowCases(bool large_clusters) {
  std::vector<Case> cases;
  for (const char* op : kOps) {
    for (DType dtype : kDtypes) {
      // Rows of 65528 and 32760 split over 16 blocks in the layer norm and the norm backward
      // passes (16-bit and float32), rows of 16392 float32 over 9.
      for (int64_t cols : {int64_t{16392}, int64_t{65528}, int64_t{32760}}) {
        const Case c{op, dtype, cols == 16392 ? 600 : 150, cols, 8, 0};
        if (NeedsLargeClusters(c) == large_clusters) cases.push_back(c);
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RowwiseManyLongRows, ::testing::ValuesIn(LongRowCases(false)));

// Kept apart to be named: under synccheck, which runs with CUDAOPS_MAX_CLUSTER_SIZE=8
// (test/CMakeLists.txt), these rows take other kernels instead (streamed, or 8 larger blocks).
class RowwiseLargeClusters : public ::testing::TestWithParam<Case> {};

TEST_P(RowwiseLargeClusters, MatchesReference) {
  EXPECT_TRUE(CheckCase(GetParam(), nullptr));
}

INSTANTIATE_TEST_SUITE_P(Norms, RowwiseLargeClusters, ::testing::ValuesIn(LongRowCases(true)));

// Rows longer than 8 split blocks of 256 threads hold (16-bit rows above 65536 columns, float32
// above 32768), on many rows: the forward ops' clusters of 16 blocks of 256 (98312 columns) or
// 512 threads, and the norm backward passes' long-row kernel, whose clusters each take several
// rows; with part of a vector at the row's end (200001 columns) and row strides past cols.
class RowwiseVeryLongRows : public ::testing::TestWithParam<Case> {};

TEST_P(RowwiseVeryLongRows, MatchesReference) {
  EXPECT_TRUE(CheckCase(GetParam(), nullptr));
}

std::vector<Case> VeryLongRowCases() {
  std::vector<Case> cases;
  for (const char* op : kOps) {
    for (DType dtype : kDtypes) {
      cases.push_back({op, dtype, 70, 131080, 8, 0});
      cases.push_back({op, dtype, 19, 262144, 0, 0});
      cases.push_back({op, dtype, 23, 200001, 7, 0});
      cases.push_back({op, dtype, 41, 98312, 8, 0});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RowwiseVeryLongRows, ::testing::ValuesIn(VeryLongRowCases()));

class RowwiseOps : public ::testing::TestWithParam<const char*> {};

TEST_P(RowwiseOps, NonDefaultStream) {
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  for (DType dtype : kDtypes) {
    EXPECT_TRUE(CheckCase({GetParam(), dtype, 513, 1000, 0, 0}, stream.get()));
    EXPECT_TRUE(CheckCase({GetParam(), dtype, 7, 40000, 3, 0}, stream.get()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, RowwiseOps, ::testing::ValuesIn(kOps),
                         [](const auto& param_info) { return std::string(param_info.param); });

// ---------------------------------------------------------------------------------------------
// Direct calls: data made here, results compared here.

struct Matrix {
  HostArray host;
  DeviceArray device;
  RowShape shape;

  Status make(DType dtype, RowShape s, uint64_t seed, int64_t offset = 0) {
    shape = s;
    host = HostArray(dtype, s.rows * s.row_stride);
    ref::fill_random(host, seed);
    Status status = device.allocate(dtype, host.size(), offset);
    if (status.ok()) status = device.upload(host, nullptr);
    return status;
  }
  Status reset() { return device.upload(host, nullptr); }
  ConstMatrixRef in() const { return {device.data(), shape.row_stride}; }
  MatrixRef out() { return {device.data(), shape.row_stride}; }
  HostArray rows_now(cudaStream_t stream = nullptr) const {
    HostArray got;
    EXPECT_TRUE(device.download(&got, stream).ok());
    return ref::dense_rows(got, shape);
  }
};

::testing::AssertionResult Close(const HostArray& got, const std::vector<double>& want, R kind) {
  const ref::CompareResult r =
      ref::compare(got, want, ref::rowwise_tolerance(got.dtype(), kind, want));
  if (r.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.describe();
}

class RowwiseDtype : public ::testing::TestWithParam<DType> {};

TEST_P(RowwiseDtype, InPlace) {
  const DType dtype = GetParam();
  for (int64_t cols : {199, 1000, 4096, 50000}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const RowShape s{33, cols, cols};
    Matrix x, dy, weight, bias;
    ASSERT_TRUE(x.make(dtype, s, 1).ok());
    ASSERT_TRUE(dy.make(dtype, s, 2).ok());
    ASSERT_TRUE(weight.make(dtype, {1, cols, cols}, 3).ok());
    ASSERT_TRUE(bias.make(dtype, {1, cols, cols}, 4).ok());

    // softmax, y = x
    ASSERT_TRUE(softmax(x.in(), x.out(), s.rows, cols, dtype, nullptr).ok());
    EXPECT_TRUE(Close(x.rows_now(), ref::softmax(x.host, s), R::kValues)) << "softmax";
    // softmax_backward, dx = dy (y is the softmax just computed)
    HostArray y = x.rows_now();
    ASSERT_TRUE(softmax_backward(x.in(), dy.in(), dy.out(), s.rows, cols, dtype, nullptr).ok());
    EXPECT_TRUE(Close(dy.rows_now(), ref::softmax_backward(y, dy.host, s), R::kGradient))
        << "softmax_backward";
    // layer_norm and rms_norm, y = x
    ASSERT_TRUE(x.reset().ok());
    ASSERT_TRUE(layer_norm(x.in(), weight.device.data(), bias.device.data(), x.out(), nullptr,
                           nullptr, s.rows, cols, 1e-5f, dtype, nullptr)
                    .ok());
    EXPECT_TRUE(
        Close(x.rows_now(), ref::layer_norm(x.host, weight.host, bias.host, s, 1e-5).y, R::kValues))
        << "layer_norm";
    ASSERT_TRUE(x.reset().ok());
    ASSERT_TRUE(rms_norm(x.in(), weight.device.data(), x.out(), nullptr, s.rows, cols, 1e-6f, dtype,
                         nullptr)
                    .ok());
    EXPECT_TRUE(Close(x.rows_now(), ref::rms_norm(x.host, weight.host, s, 1e-6).y, R::kValues))
        << "rms_norm";

    // rms_norm_backward, dx = dy
    ASSERT_TRUE(x.reset().ok());
    ASSERT_TRUE(dy.reset().ok());
    const ref::NormForward f = ref::rms_norm(x.host, weight.host, s, 1e-6);
    HostArray rstd_host(DType::kFloat32, s.rows);
    std::vector<float> rstd(f.rstd.begin(), f.rstd.end());
    for (int64_t r = 0; r < s.rows; ++r)
      rstd_host.set(r, rstd[r]);
    DeviceArray rstd_device, dweight;
    ASSERT_TRUE(rstd_device.allocate(DType::kFloat32, s.rows).ok());
    ASSERT_TRUE(rstd_device.upload(rstd_host, nullptr).ok());
    ASSERT_TRUE(dweight.allocate(dtype, cols).ok());
    size_t bytes = 0;
    ASSERT_TRUE(rms_norm_backward_workspace_size({s.rows, cols, dtype}, &bytes).ok());
    DeviceBuffer workspace;
    ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
    ASSERT_TRUE(
        rms_norm_backward({dy.in(), x.in(), weight.device.data(),
                           static_cast<const float*>(rstd_device.data()), dy.out(), dweight.data()},
                          {s.rows, cols, dtype}, {workspace.get(), bytes}, nullptr)
            .ok());
    const ref::NormBackward g = ref::rms_norm_backward(dy.host, x.host, weight.host, rstd, s);
    EXPECT_TRUE(Close(dy.rows_now(), g.dx, R::kGradient)) << "rms_norm_backward dx";
    HostArray dw;
    ASSERT_TRUE(dweight.download(&dw, nullptr).ok());
    EXPECT_TRUE(Close(dw, g.dweight, R::kParamGradient)) << "rms_norm_backward dweight";
  }
}

// The same call twice gives the same bits: dx, dweight and dbias.
TEST_P(RowwiseDtype, BackwardIsDeterministic) {
  const DType dtype = GetParam();
  for (int64_t cols : {1000, 4096, 32768, 131072}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    // 131072 columns: the long-row backward kernel, a few rows per cluster (fewer rows keep
    // racecheck short).
    const int64_t rows = cols == 131072 ? 37 : cols == 32768 ? 600 : 4099;
    const RowShape s{rows, cols, cols};
    Matrix x, dy, weight;
    ASSERT_TRUE(x.make(dtype, s, 5).ok());
    ASSERT_TRUE(dy.make(dtype, s, 6).ok());
    ASSERT_TRUE(weight.make(dtype, {1, cols, cols}, 7).ok());
    DeviceArray mean, rstd, dx, dweight, dbias;
    ASSERT_TRUE(mean.allocate(DType::kFloat32, rows).ok());
    ASSERT_TRUE(rstd.allocate(DType::kFloat32, rows).ok());
    ASSERT_TRUE(dx.allocate(dtype, rows * cols).ok());
    ASSERT_TRUE(dweight.allocate(dtype, cols).ok());
    ASSERT_TRUE(dbias.allocate(dtype, cols).ok());
    // Real statistics, from the forward pass.
    DeviceArray y;
    ASSERT_TRUE(y.allocate(dtype, rows * cols).ok());
    ASSERT_TRUE(layer_norm(x.in(), weight.device.data(), weight.device.data(), {y.data(), cols},
                           static_cast<float*>(mean.data()), static_cast<float*>(rstd.data()), rows,
                           cols, 1e-5f, dtype, nullptr)
                    .ok());
    size_t bytes = 0;
    ASSERT_TRUE(layer_norm_backward_workspace_size({rows, cols, dtype}, &bytes).ok());
    DeviceBuffer workspace;
    ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
    HostArray first[3], second[3];
    for (HostArray* out : {first, second}) {
      ASSERT_TRUE(dx.poison(nullptr).ok());
      ASSERT_TRUE(dweight.poison(nullptr).ok());
      ASSERT_TRUE(dbias.poison(nullptr).ok());
      ASSERT_TRUE(layer_norm_backward({dy.in(),
                                       x.in(),
                                       weight.device.data(),
                                       static_cast<const float*>(mean.data()),
                                       static_cast<const float*>(rstd.data()),
                                       {dx.data(), cols},
                                       dweight.data(),
                                       dbias.data()},
                                      {rows, cols, dtype}, {workspace.get(), bytes}, nullptr)
                      .ok());
      ASSERT_TRUE(dx.download(&out[0], nullptr).ok());
      ASSERT_TRUE(dweight.download(&out[1], nullptr).ok());
      ASSERT_TRUE(dbias.download(&out[2], nullptr).ok());
    }
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(first[i].size_bytes(), second[i].size_bytes());
      EXPECT_EQ(std::memcmp(first[i].data(), second[i].data(),
                            static_cast<size_t>(first[i].size_bytes())),
                0)
          << "output " << i << " differs between two runs";
    }
    // And rms_norm_backward.
    ASSERT_TRUE(rms_norm_backward_workspace_size({rows, cols, dtype}, &bytes).ok());
    HostArray w1, w2;
    for (HostArray* out : {&w1, &w2}) {
      ASSERT_TRUE(dweight.poison(nullptr).ok());
      ASSERT_TRUE(rms_norm_backward({dy.in(),
                                     x.in(),
                                     weight.device.data(),
                                     static_cast<const float*>(rstd.data()),
                                     {dx.data(), cols},
                                     dweight.data()},
                                    {rows, cols, dtype}, {workspace.get(), bytes}, nullptr)
                      .ok());
      ASSERT_TRUE(dweight.download(out, nullptr).ok());
    }
    EXPECT_EQ(std::memcmp(w1.data(), w2.data(), static_cast<size_t>(w1.size_bytes())), 0);
  }
}

TEST_P(RowwiseDtype, GraphCapture) {
  const DType dtype = GetParam();
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  for (int64_t cols : {1000, 40000}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const RowShape s{65, cols, cols};
    Matrix x, y, residual, weight, dz, dy_softmax, dx_softmax;
    ASSERT_TRUE(dz.make(dtype, s, 14).ok());
    ASSERT_TRUE(dy_softmax.make(dtype, s, 15).ok());
    ASSERT_TRUE(dx_softmax.make(dtype, s, 16).ok());
    ASSERT_TRUE(x.make(dtype, s, 8).ok());
    ASSERT_TRUE(y.make(dtype, s, 9).ok());
    ASSERT_TRUE(residual.make(dtype, s, 10).ok());
    ASSERT_TRUE(weight.make(dtype, {1, cols, cols}, 11).ok());
    size_t bytes = 0;
    ASSERT_TRUE(rms_norm_backward_workspace_size({s.rows, cols, dtype}, &bytes).ok());
    DeviceBuffer workspace;
    ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
    DeviceArray rstd, dweight;
    ASSERT_TRUE(rstd.allocate(DType::kFloat32, s.rows).ok());
    ASSERT_TRUE(dweight.allocate(dtype, cols).ok());
    ASSERT_TRUE(y.device.poison(stream.get()).ok());
    ASSERT_TRUE(dx_softmax.device.poison(stream.get()).ok());

    // Captured: softmax into y and its backward from y, the fused op, then rms_norm_backward of
    // the fused op's residual (dx written over dy).
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status s1 = softmax(x.in(), y.out(), s.rows, cols, dtype, stream.get());
    const Status s5 = softmax_backward(y.in(), dy_softmax.in(), dx_softmax.out(), s.rows, cols,
                                       dtype, stream.get());
    const Status s2 =
        rms_norm(x.in(), weight.device.data(), MatrixRef{nullptr, 0},
                 static_cast<float*>(rstd.data()), 0, cols, 1e-6f, dtype, stream.get());
    const Status s3 = fused_add_rms_norm(x.out(), residual.out(), weight.device.data(), s.rows,
                                         cols, 1e-6f, dtype, stream.get());
    const Status s4 =
        rms_norm_backward({dz.in(), residual.in(), weight.device.data(),
                           static_cast<const float*>(rstd.data()), dz.out(), dweight.data()},
                          {s.rows, cols, dtype}, {workspace.get(), bytes}, stream.get());
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    ASSERT_TRUE(s1.ok()) << s1.to_string();
    ASSERT_TRUE(s2.ok()) << s2.to_string();
    ASSERT_TRUE(s3.ok()) << s3.to_string();
    ASSERT_TRUE(s4.ok()) << s4.to_string();
    ASSERT_TRUE(s5.ok()) << s5.to_string();
    // rstd comes from the fused op's residual: computed here on the host, uploaded before launch.
    const ref::FusedAddRmsNorm fused =
        ref::fused_add_rms_norm(x.host, residual.host, weight.host, s, 1e-6);
    HostArray res_stored(dtype, s.rows * cols);
    for (int64_t i = 0; i < s.rows * cols; ++i)
      res_stored.set(i, fused.residual[i]);
    const ref::NormForward f = ref::rms_norm(res_stored, weight.host, s, 1e-6);
    std::vector<float> rstd_f(f.rstd.begin(), f.rstd.end());
    HostArray rstd_host(DType::kFloat32, s.rows);
    for (int64_t r = 0; r < s.rows; ++r)
      rstd_host.set(r, rstd_f[r]);
    ASSERT_TRUE(rstd.upload(rstd_host, stream.get()).ok());

    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);

    const HostArray y_now = y.rows_now(stream.get());
    EXPECT_TRUE(Close(y_now, ref::softmax(x.host, s), R::kValues)) << "softmax";
    EXPECT_TRUE(Close(dx_softmax.rows_now(stream.get()),
                      ref::softmax_backward(y_now, dy_softmax.host, s), R::kGradient))
        << "softmax_backward";
    EXPECT_TRUE(Close(x.rows_now(stream.get()), fused.y, R::kValues)) << "fused x";
    EXPECT_TRUE(Close(residual.rows_now(stream.get()), fused.residual, R::kValues))
        << "fused residual";
    const ref::NormBackward g = ref::rms_norm_backward(dz.host, res_stored, weight.host, rstd_f, s);
    EXPECT_TRUE(Close(dz.rows_now(stream.get()), g.dx, R::kGradient)) << "rms_norm_backward dx";
    HostArray dw;
    ASSERT_TRUE(dweight.download(&dw, stream.get()).ok());
    EXPECT_TRUE(Close(dw, g.dweight, R::kParamGradient)) << "rms_norm_backward dweight";
  }
}

// Calls back to back on one stream, each reading what the one before wrote or writing what it
// read, give the same bits as the same calls with the stream synchronised between them, and so
// does their graph. On sm_90 the kernels are launched as dependent on the kernel before them
// (their blocks may be placed while it finishes): this checks that each waits for it before
// touching memory. The outputs are poisoned before each run, so a read too early shows.
TEST_P(RowwiseDtype, ChainedCallsSeeEachOthersResults) {
  const DType dtype = GetParam();
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  // Many rows of the one-warp kernels; rows split over clusters (sm_90) or streamed.
  for (const RowShape s : {RowShape{16384, 1024, 1024}, RowShape{257, 40000, 40000}}) {
    const int64_t rows = s.rows;
    const int64_t cols = s.cols;
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    Matrix x, weight, bias;
    ASSERT_TRUE(x.make(dtype, s, 21).ok());
    ASSERT_TRUE(weight.make(dtype, {1, cols, cols}, 22).ok());
    ASSERT_TRUE(bias.make(dtype, {1, cols, cols}, 23).ok());
    DeviceArray a, b, c, mean, rstd1, rstd2, dweight, dweight2, dbias;
    for (DeviceArray* m : {&a, &b, &c})
      ASSERT_TRUE(m->allocate(dtype, rows * cols).ok());
    for (DeviceArray* v : {&mean, &rstd1, &rstd2})
      ASSERT_TRUE(v->allocate(DType::kFloat32, rows).ok());
    for (DeviceArray* v : {&dweight, &dweight2, &dbias})
      ASSERT_TRUE(v->allocate(dtype, cols).ok());
    size_t bytes = 0, layer_bytes = 0;
    ASSERT_TRUE(rms_norm_backward_workspace_size({rows, cols, dtype}, &bytes).ok());
    ASSERT_TRUE(layer_norm_backward_workspace_size({rows, cols, dtype}, &layer_bytes).ok());
    DeviceBuffer workspace;
    ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(std::max(bytes, layer_bytes))).ok());
    const auto f = [](const DeviceArray& m) { return static_cast<float*>(m.data()); };
    const auto in = [&](const DeviceArray& m) { return ConstMatrixRef{m.data(), cols}; };
    const auto out = [&](DeviceArray& m) { return MatrixRef{m.data(), cols}; };
    DeviceArray* const outputs[] = {&a, &b, &c, &mean, &rstd1, &rstd2, &dweight, &dweight2, &dbias};

    // The chain: each step's inputs are earlier steps' outputs (x the only input from the host).
    const auto chain = [&](cudaStream_t st, bool sync) -> ::testing::AssertionResult {
      const auto step = [&](const Status& status, const char* what) {
        if (!status.ok())
          return ::testing::AssertionFailure() << what << ": " << status.to_string();
        if (sync && cudaStreamSynchronize(st) != cudaSuccess)
          return ::testing::AssertionFailure() << what << ": synchronize failed";
        return ::testing::AssertionSuccess();
      };
      const void* w = weight.device.data();
      ::testing::AssertionResult r = step(layer_norm(x.in(), w, bias.device.data(), out(a), f(mean),
                                                     f(rstd1), rows, cols, 1e-5f, dtype, st),
                                          "layer_norm x -> a");
      if (r)
        r = step(rms_norm(in(a), w, out(b), f(rstd2), rows, cols, 1e-6f, dtype, st),
                 "rms_norm a -> b");
      if (r) r = step(softmax(in(b), x.out(), rows, cols, dtype, st), "softmax b -> x");
      if (r)
        r = step(softmax_backward(x.in(), in(a), out(c), rows, cols, dtype, st),
                 "softmax_backward x, a -> c");
      if (r)
        r = step(fused_add_rms_norm(out(c), out(a), w, rows, cols, 1e-6f, dtype, st),
                 "fused_add_rms_norm c, a");
      // The gradients of the norms in place (dx over dy), from dy = x: small values, so that the
      // float16 parameter gradients (sums over every row) stay finite.
      if (r)
        r = step(rms_norm_backward({x.in(), in(b), w, f(rstd2), x.out(), dweight.data()},
                                   {rows, cols, dtype}, {workspace.get(), bytes}, st),
                 "rms_norm_backward x, b -> x");
      if (r)
        r = step(layer_norm_backward(
                     {x.in(), in(a), w, f(mean), f(rstd1), x.out(), dweight2.data(), dbias.data()},
                     {rows, cols, dtype}, {workspace.get(), layer_bytes}, st),
                 "layer_norm_backward x, a -> x");
      // A dependent launch after the plain ones of a backward pass.
      if (r)
        r = step(rms_norm(x.in(), w, out(c), nullptr, rows, cols, 1e-6f, dtype, st),
                 "rms_norm x -> c");
      return r;
    };
    const auto reset = [&]() {
      ASSERT_TRUE(x.device.upload(x.host, stream.get()).ok());
      for (DeviceArray* m : outputs)
        ASSERT_TRUE(m->poison(stream.get()).ok());
    };
    const auto results = [&](std::vector<HostArray>* got) {
      got->clear();
      got->emplace_back();
      ASSERT_TRUE(x.device.download(&got->back(), stream.get()).ok());
      for (DeviceArray* m : outputs) {
        got->emplace_back();
        ASSERT_TRUE(m->download(&got->back(), stream.get()).ok());
      }
    };

    std::vector<HostArray> apart, together, graphed;
    reset();
    ASSERT_TRUE(chain(stream.get(), true));
    results(&apart);

    reset();
    ASSERT_TRUE(chain(stream.get(), false));
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    results(&together);

    reset();
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const ::testing::AssertionResult captured = chain(stream.get(), false);
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    ASSERT_TRUE(captured);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    results(&graphed);

    const char* const names[] = {"x",     "a",     "b",       "c",        "mean",
                                 "rstd1", "rstd2", "dweight", "dweight2", "dbias"};
    ASSERT_EQ(apart.size(), 10u);
    for (size_t i = 0; i < apart.size(); ++i) {
      ASSERT_EQ(apart[i].size_bytes(), together[i].size_bytes());
      EXPECT_EQ(std::memcmp(apart[i].data(), together[i].data(),
                            static_cast<size_t>(apart[i].size_bytes())),
                0)
          << names[i] << ": back to back differs from synchronised";
      EXPECT_EQ(std::memcmp(apart[i].data(), graphed[i].data(),
                            static_cast<size_t>(apart[i].size_bytes())),
                0)
          << names[i] << ": the graph differs from synchronised";
    }
    // Every output of the synchronised run was written (poison is 0xff bytes: NaN), and its
    // first step's statistics are right.
    for (size_t i = 0; i < apart.size(); ++i) {
      int64_t bad = 0;
      for (int64_t k = 0; k < apart[i].size(); ++k)
        bad += std::isfinite(apart[i].get(k)) ? 0 : 1;
      EXPECT_EQ(bad, 0) << names[i] << ": entries not finite";
    }
    const ref::NormForward first = ref::layer_norm(x.host, weight.host, bias.host, s, 1e-5);
    EXPECT_TRUE(Close(apart[4], first.mean, R::kStatistics)) << "layer_norm mean";
    EXPECT_TRUE(Close(apart[5], first.rstd, R::kStatistics)) << "layer_norm rstd";
  }
}

// Softmax on rows with large magnitudes, -inf entries, all-equal values and a row of -inf.
TEST_P(RowwiseDtype, SoftmaxSpecialValues) {
  const DType dtype = GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  const double big = dtype == DType::kFloat16 ? 30000.0 : 1e30;
  for (int64_t cols : {7, 1000, 4097, 40000}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const RowShape s{6, cols, cols};
    Matrix x, y;
    ASSERT_TRUE(x.make(dtype, s, 12).ok());
    ASSERT_TRUE(y.make(dtype, s, 13).ok());
    for (int64_t c = 0; c < cols; ++c) {
      x.host.set(0 * cols + c, x.host.get(0 * cols + c) * big / 2);        // large magnitudes
      x.host.set(1 * cols + c, c % 3 == 0 ? -inf : x.host.get(cols + c));  // some -inf
      x.host.set(2 * cols + c, 0.75);                                      // all equal
      x.host.set(3 * cols + c, -inf);                                      // all -inf: NaN
      x.host.set(4 * cols + c, c == cols / 2 ? big : -big);                // one hot
      x.host.set(5 * cols + c, c % 2 ? -big : x.host.get(5 * cols + c));
    }
    ASSERT_TRUE(x.reset().ok());
    ASSERT_TRUE(y.device.poison(nullptr).ok());
    ASSERT_TRUE(softmax(x.in(), y.out(), s.rows, cols, dtype, nullptr).ok());
    EXPECT_TRUE(Close(y.rows_now(), ref::softmax(x.host, s), R::kValues));
  }
}

TEST_P(RowwiseDtype, BadDeviceArguments) {
  const DType dtype = GetParam();
  DeviceArray a, b;
  ASSERT_TRUE(a.allocate(dtype, 4096).ok());
  ASSERT_TRUE(b.allocate(dtype, 4096).ok());
  ASSERT_TRUE(b.poison(nullptr).ok());
  void* odd = static_cast<char*>(a.data()) + 1;
  EXPECT_EQ(softmax({odd, 64}, {b.data(), 64}, 4, 64, dtype, nullptr).code(),
            StatusCode::kMisaligned);
  EXPECT_EQ(
      rms_norm({a.data(), 64}, odd, {b.data(), 64}, nullptr, 4, 64, 1e-6f, dtype, nullptr).code(),
      StatusCode::kMisaligned);
  size_t bytes = 0;
  ASSERT_TRUE(rms_norm_backward_workspace_size({64, 64, dtype}, &bytes).ok());
  ASSERT_GT(bytes, 0u);
  DeviceBuffer workspace;
  ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
  DeviceArray rstd, dweight;
  ASSERT_TRUE(rstd.allocate(DType::kFloat32, 64).ok());
  ASSERT_TRUE(dweight.allocate(dtype, 64).ok());
  // The query covers every path; any call needs more than 16 bytes of partial sums here.
  for (size_t given : {size_t{0}, size_t{16}}) {
    const Status small = rms_norm_backward({{a.data(), 64},
                                            {a.data(), 64},
                                            a.data(),
                                            static_cast<const float*>(rstd.data()),
                                            {b.data(), 64},
                                            dweight.data()},
                                           {64, 64, dtype}, {workspace.get(), given}, nullptr);
    EXPECT_EQ(small.code(), StatusCode::kWorkspaceTooSmall) << small.to_string();
  }
  // Nothing was written.
  HostArray got;
  ASSERT_TRUE(b.download(&got, nullptr).ok());
  const auto* bytes_got = static_cast<const unsigned char*>(got.data());
  for (int64_t i = 0; i < got.size_bytes(); ++i)
    ASSERT_EQ(bytes_got[i], 0xff) << "byte " << i << " was written";
}

// rows == 0 with cols > 0: the parameter gradients are zeros.
TEST_P(RowwiseDtype, NoRowsGivesZeroParamGradients) {
  const DType dtype = GetParam();
  DeviceArray dweight, dbias;
  ASSERT_TRUE(dweight.allocate(dtype, 300).ok());
  ASSERT_TRUE(dbias.allocate(dtype, 300).ok());
  ASSERT_TRUE(dweight.poison(nullptr).ok());
  ASSERT_TRUE(dbias.poison(nullptr).ok());
  size_t bytes = 1;
  ASSERT_TRUE(layer_norm_backward_workspace_size({0, 300, dtype}, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  ASSERT_TRUE(layer_norm_backward({{nullptr, 0},
                                   {nullptr, 0},
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   {nullptr, 0},
                                   dweight.data(),
                                   dbias.data()},
                                  {0, 300, dtype}, {nullptr, 0}, nullptr)
                  .ok());
  for (DeviceArray* a : {&dweight, &dbias}) {
    HostArray got;
    ASSERT_TRUE(a->download(&got, nullptr).ok());
    for (int64_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got.get(i), 0.0) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, RowwiseDtype, ::testing::ValuesIn(kDtypes),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

// ---------------------------------------------------------------------------------------------
// More than 2^31 elements: data made on the device, sampled rows checked on the host.

void CheckSampledRows(DType dtype, const DeviceArray& out, int64_t rows, int64_t cols,
                      uint64_t seed, bool layer) {
  const int64_t sample[] = {0, 1, rows / 2, (int64_t{1} << 31) / cols + 1, rows - 2, rows - 1};
  for (int64_t r : sample) {
    HostArray x(dtype, cols), got(dtype, cols);
    for (int64_t c = 0; c < cols; ++c)
      x.set(c, testing::hashed_value(seed, r * cols + c));
    const size_t size = static_cast<size_t>(dtype_size(dtype));
    ASSERT_EQ(cudaMemcpy(got.data(), static_cast<const char*>(out.data()) + r * cols * size,
                         cols * size, cudaMemcpyDeviceToHost),
              cudaSuccess);
    HostArray ones(dtype, cols), zeros(dtype, cols);
    for (int64_t c = 0; c < cols; ++c) {
      ones.set(c, 1.0);
      zeros.set(c, 0.0);
    }
    const std::vector<double> want = layer
                                         ? ref::layer_norm(x, ones, zeros, {1, cols, cols}, 1e-5).y
                                         : ref::softmax(x, {1, cols, cols});
    EXPECT_TRUE(Close(got, want, R::kValues)) << "row " << r;
  }
}

// rowwise_plan says which kernel each shape takes, from the ops' own ladders.
TEST(RowwisePlan, PathsByShape) {
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  const DType bf16 = DType::kBFloat16;
  RowwisePlan plan;
  ASSERT_TRUE(rowwise_plan(RowwiseOp::kSoftmax, 64, 1024, bf16, true, &plan).ok());
  EXPECT_STREQ(plan.path, "cached");
  EXPECT_EQ(plan.row_threads, 32);
  EXPECT_EQ(plan.chunks, 4);
  EXPECT_EQ(plan.block_threads, 128);
  EXPECT_EQ(plan.blocks, 16);
  ASSERT_TRUE(rowwise_plan(RowwiseOp::kSoftmax, 64, 1024, bf16, false, &plan).ok());
  EXPECT_STREQ(plan.path, "streamed");
  ASSERT_TRUE(rowwise_plan(RowwiseOp::kSoftmax, 0, 1024, bf16, true, &plan).ok());
  EXPECT_STREQ(plan.path, "none");
  EXPECT_EQ(plan.blocks, 0);
  // 32768 bf16 columns: past the cached kernels; split over 8 blocks of 128 x 4 chunks on sm_90.
  for (RowwiseOp op : {RowwiseOp::kSoftmax, RowwiseOp::kSoftmaxBackward, RowwiseOp::kLayerNorm,
                       RowwiseOp::kRmsNorm, RowwiseOp::kFusedAddRmsNorm}) {
    SCOPED_TRACE(static_cast<int>(op));
    ASSERT_TRUE(rowwise_plan(op, 16, 32768, bf16, true, &plan).ok());
    if (major >= 9) {
      EXPECT_STREQ(plan.path, "split");
      EXPECT_EQ(plan.blocks_per_row, 8);
      EXPECT_EQ(plan.row_threads, 128);
    } else {
      EXPECT_STRNE(plan.path, "split");
    }
  }
  // float32 layer norm rows of 4 parts: two rows at once per cluster.
  ASSERT_TRUE(rowwise_plan(RowwiseOp::kLayerNorm, 16, 8192, DType::kFloat32, true, &plan).ok());
  EXPECT_STREQ(plan.path, major >= 9 ? "split_rows" : "streamed");
  // The backward norms: the plan's workspace is what the op asks for.
  for (RowwiseOp op : {RowwiseOp::kLayerNormBackward, RowwiseOp::kRmsNormBackward}) {
    for (int64_t cols : {1000, 1024, 32768, 262144}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(op)) + " cols " + std::to_string(cols));
      size_t bytes = 0;
      ASSERT_TRUE((op == RowwiseOp::kLayerNormBackward
                       ? layer_norm_backward_workspace_size({64, cols, bf16}, &bytes)
                       : rms_norm_backward_workspace_size({64, cols, bf16}, &bytes))
                      .ok());
      ASSERT_TRUE(rowwise_plan(op, 64, cols, bf16, true, &plan).ok());
      EXPECT_GT(plan.blocks, 0);
      EXPECT_GT(plan.workspace_bytes, 0u);
      EXPECT_LE(plan.workspace_bytes, bytes);
      if (cols <= 1024) {
        EXPECT_STREQ(plan.path, "cached");
      }
    }
  }
}

TEST(RowwiseHuge, BeyondTwoToThe31Elements) {
  const DType dtype = DType::kFloat16;
  for (int64_t cols : {4096, 100000}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = (int64_t{1} << 31) / cols + 3;
    const int64_t n = rows * cols;
    size_t free_bytes = 0, total_bytes = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
    if (static_cast<int64_t>(free_bytes) < 2 * n * 2 + (int64_t{1} << 30)) {
      GTEST_SKIP() << "needs " << 2 * n * 2 / (1 << 20) << " MiB of device memory";
    }
    DeviceArray x, y, weight, bias;
    ASSERT_TRUE(x.allocate(dtype, n).ok());
    ASSERT_TRUE(y.allocate(dtype, n).ok());
    ASSERT_TRUE(weight.allocate(dtype, cols).ok());
    ASSERT_TRUE(bias.allocate(dtype, cols).ok());
    HostArray ones(dtype, cols), zeros(dtype, cols);
    for (int64_t c = 0; c < cols; ++c) {
      ones.set(c, 1.0);
      zeros.set(c, 0.0);
    }
    ASSERT_TRUE(weight.upload(ones, nullptr).ok());
    ASSERT_TRUE(bias.upload(zeros, nullptr).ok());
    ASSERT_TRUE(testing::fill_hashed(x.data(), dtype, n, 21, nullptr).ok());
    ASSERT_TRUE(y.poison(nullptr).ok());
    ASSERT_TRUE(softmax({x.data(), cols}, {y.data(), cols}, rows, cols, dtype, nullptr).ok());
    CheckSampledRows(dtype, y, rows, cols, 21, false);
    ASSERT_TRUE(y.poison(nullptr).ok());
    ASSERT_TRUE(layer_norm({x.data(), cols}, weight.data(), bias.data(), {y.data(), cols}, nullptr,
                           nullptr, rows, cols, 1e-5f, dtype, nullptr)
                    .ok());
    CheckSampledRows(dtype, y, rows, cols, 21, true);
  }
}

}  // namespace
}  // namespace cudaops
