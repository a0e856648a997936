// add and add_scalar on the device against the double-precision reference.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <ostream>
#include <thread>
#include <vector>

#include "cudaops/elementwise.h"
#include "harness/cuda_util.h"
#include "harness/device_buffer.h"
#include "reference/compare.h"
#include "reference/elementwise.h"
#include "reference/host_float.h"
#include "support/device_fill.h"

namespace cudaops {
namespace {

using harness::DeviceArray;
using ref::HostArray;

constexpr float kAlpha = -0.3183098861837907f;  // 1/pi: not exact in float16 or bfloat16
constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

enum class Op { kAdd, kAddScalar };
enum class Alias { kNone, kOutIsA, kOutIsB };

struct Case {
  Op op = Op::kAdd;
  DType dtype = DType::kFloat32;
  int64_t n = 0;
  int64_t offset_a = 0;
  int64_t offset_b = 0;
  int64_t offset_out = 0;
  Alias alias = Alias::kNone;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  os << (c.op == Op::kAdd ? "add" : "add_scalar") << " " << dtype_name(c.dtype) << " n=" << c.n
     << " offsets a=" << c.offset_a << " b=" << c.offset_b << " out=" << c.offset_out;
  if (c.alias == Alias::kOutIsA) os << " in place (out = a)";
  if (c.alias == Alias::kOutIsB) os << " in place (out = b)";
  return os;
}

enum class Launch { kDirect, kGraph };

Status call(const Case& c, const void* a, const void* b, void* out, cudaStream_t stream) {
  return c.op == Op::kAdd ? add(a, b, out, c.n, c.dtype, stream)
                          : add_scalar(a, kAlpha, out, c.n, c.dtype, stream);
}

// Runs one case from fresh random inputs and a poisoned output; compares with the reference.
::testing::AssertionResult RunCase(const Case& c, cudaStream_t stream,
                                   Launch launch = Launch::kDirect) {
  const uint64_t seed = static_cast<uint64_t>(c.n * 131 + c.offset_a * 17 + c.offset_b * 5 +
                                              c.offset_out + static_cast<int>(c.dtype) * 1000);
  HostArray host_a(c.dtype, c.n);
  HostArray host_b(c.dtype, c.n);
  ref::fill_random(host_a, seed);
  ref::fill_random(host_b, seed + 1);
  DeviceArray a, b, out;
  Status status = a.allocate(c.dtype, c.n, c.offset_a);
  if (status.ok()) status = b.allocate(c.dtype, c.n, c.offset_b);
  if (status.ok() && c.alias == Alias::kNone) status = out.allocate(c.dtype, c.n, c.offset_out);
  if (status.ok()) status = a.upload(host_a, stream);
  if (status.ok()) status = b.upload(host_b, stream);
  if (status.ok()) status = out.poison(stream);
  if (!status.ok()) return ::testing::AssertionFailure() << c << ": setup: " << status.to_string();

  DeviceArray* result = c.alias == Alias::kOutIsA ? &a : c.alias == Alias::kOutIsB ? &b : &out;
  std::vector<double> want =
      c.op == Op::kAdd ? ref::add(host_a, host_b) : ref::add_scalar(host_a, kAlpha);

  if (launch == Launch::kDirect) {
    status = call(c, a.data(), b.data(), result->data(), stream);
  } else {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    status = harness::cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
                                 "cudaStreamBeginCapture");
    if (status.ok()) {
      const Status op_status = call(c, a.data(), b.data(), result->data(), stream);
      status = harness::cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
      if (!op_status.ok()) status = op_status;
    }
    if (status.ok()) {
      status = harness::cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    }
    if (status.ok()) status = harness::cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  if (!status.ok()) return ::testing::AssertionFailure() << c << ": " << status.to_string();

  HostArray got;
  status = result->download(&got, stream);
  if (!status.ok()) return ::testing::AssertionFailure() << c << ": " << status.to_string();
  const ref::CompareResult r = ref::compare(got, want, ref::rounding_tolerance(c.dtype));
  if (!r.ok()) return ::testing::AssertionFailure() << c << ": " << r.describe();
  return ::testing::AssertionSuccess();
}

class ElementwiseSizes : public ::testing::TestWithParam<Case> {};

TEST_P(ElementwiseSizes, MatchesReference) {
  EXPECT_TRUE(RunCase(GetParam(), nullptr));
}

std::vector<Case> SizeCases() {
  std::vector<Case> cases;
  for (Op op : {Op::kAdd, Op::kAddScalar}) {
    for (DType dtype : kDtypes) {
      for (int64_t n : {0, 1, 7, 8, 9, 199, 4096, (1 << 20) + 3}) {
        Case c;
        c.op = op;
        c.dtype = dtype;
        c.n = n;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ElementwiseSizes, ::testing::ValuesIn(SizeCases()));

class ElementwiseDtype : public ::testing::TestWithParam<DType> {};

// Every offset of 0 to 7 elements on each pointer: same offsets take the vector path with a
// head, different ones the scalar path.
TEST_P(ElementwiseDtype, EveryPointerOffset) {
  for (int64_t oa = 0; oa < 8; ++oa) {
    for (int64_t ob = 0; ob < 8; ++ob) {
      for (int64_t oo = 0; oo < 8; ++oo) {
        Case c{Op::kAdd, GetParam(), 1031, oa, ob, oo, Alias::kNone};
        ASSERT_TRUE(RunCase(c, nullptr));
        if (ob == 0) {
          c.op = Op::kAddScalar;
          ASSERT_TRUE(RunCase(c, nullptr));
        }
      }
    }
  }
}

TEST_P(ElementwiseDtype, InPlace) {
  for (int64_t n : {1, 199, (1 << 20) + 3}) {
    for (int64_t offset : {0, 3}) {
      EXPECT_TRUE(RunCase({Op::kAdd, GetParam(), n, offset, offset, 0, Alias::kOutIsA}, nullptr));
      EXPECT_TRUE(RunCase({Op::kAdd, GetParam(), n, offset, 0, 0, Alias::kOutIsB}, nullptr));
      EXPECT_TRUE(RunCase({Op::kAddScalar, GetParam(), n, offset, 0, 0, Alias::kOutIsA}, nullptr));
    }
  }
}

TEST_P(ElementwiseDtype, NonDefaultStream) {
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  for (Op op : {Op::kAdd, Op::kAddScalar}) {
    EXPECT_TRUE(RunCase({op, GetParam(), (1 << 20) + 3, 0, 0, 0, Alias::kNone}, stream.get()));
    EXPECT_TRUE(RunCase({op, GetParam(), 4097, 1, 1, 1, Alias::kNone}, stream.get()));
  }
}

TEST_P(ElementwiseDtype, GraphCapture) {
  harness::Stream stream;
  ASSERT_TRUE(stream.create().ok());
  for (Op op : {Op::kAdd, Op::kAddScalar}) {
    for (int64_t n : {0, 9, (1 << 20) + 3}) {
      EXPECT_TRUE(
          RunCase({op, GetParam(), n, 0, 0, 0, Alias::kNone}, stream.get(), Launch::kGraph));
      EXPECT_TRUE(
          RunCase({op, GetParam(), n, 2, 5, 2, Alias::kNone}, stream.get(), Launch::kGraph));
    }
  }
}

TEST_P(ElementwiseDtype, NanAndInfinityPropagate) {
  const DType dtype = GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double big = dtype == DType::kFloat16 ? 60000.0 : 3e38;  // sum overflows to inf
  const std::vector<double> a_values = {nan, 1.0, inf, inf, -inf, big, -big, 2.5, -inf};
  const std::vector<double> b_values = {1.0, nan, 1.0, -inf, -inf, big, -big, -2.5, 1.0};
  const int64_t n = static_cast<int64_t>(a_values.size());
  HostArray ha(dtype, n), hb(dtype, n);
  for (int64_t i = 0; i < n; ++i) {
    ha.set(i, a_values[i]);
    hb.set(i, b_values[i]);
  }
  DeviceArray a, b, out;
  ASSERT_TRUE(a.allocate(dtype, n).ok());
  ASSERT_TRUE(b.allocate(dtype, n).ok());
  ASSERT_TRUE(out.allocate(dtype, n).ok());
  ASSERT_TRUE(a.upload(ha, nullptr).ok());
  ASSERT_TRUE(b.upload(hb, nullptr).ok());
  for (Op op : {Op::kAdd, Op::kAddScalar}) {
    ASSERT_TRUE(out.poison(nullptr).ok());
    const Status status = op == Op::kAdd
                              ? add(a.data(), b.data(), out.data(), n, dtype, nullptr)
                              : add_scalar(a.data(), kAlpha, out.data(), n, dtype, nullptr);
    ASSERT_TRUE(status.ok()) << status.to_string();
    HostArray got;
    ASSERT_TRUE(out.download(&got, nullptr).ok());
    // The exact result rounded to the dtype: a finite sum past the largest value is infinity.
    const std::vector<double> exact =
        op == Op::kAdd ? ref::add(ha, hb) : ref::add_scalar(ha, kAlpha);
    HostArray rounded(dtype, n);
    for (int64_t i = 0; i < n; ++i)
      rounded.set(i, exact[i]);
    const ref::CompareResult r =
        ref::compare(got, rounded.to_double(), ref::rounding_tolerance(dtype));
    EXPECT_TRUE(r.ok()) << dtype_name(dtype) << (op == Op::kAdd ? " add: " : " add_scalar: ")
                        << r.describe();
  }
}

TEST_P(ElementwiseDtype, ByteMisalignedDevicePointerIsRefused) {
  DeviceArray a;
  ASSERT_TRUE(a.allocate(GetParam(), 64).ok());
  void* odd = static_cast<char*>(a.data()) + 1;
  EXPECT_EQ(add(odd, a.data(), a.data(), 8, GetParam(), nullptr).code(), StatusCode::kMisaligned);
  EXPECT_EQ(add_scalar(a.data(), 1.0f, odd, 8, GetParam(), nullptr).code(),
            StatusCode::kMisaligned);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ElementwiseDtype, ::testing::ValuesIn(kDtypes),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

// More than 2^31 elements: indices past INT_MAX must be computed in 64 bits. Data is made on the
// device; every element is checked on the host, in parallel.
TEST(ElementwiseHuge, AddBeyondTwoToThe31) {
  const DType dtype = DType::kFloat16;
  const int64_t n = (int64_t{1} << 31) + 5;
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (static_cast<int64_t>(free_bytes) < 3 * n * 2 + (int64_t{1} << 30)) {
    GTEST_SKIP() << "needs " << 3 * n * 2 / (1 << 20) << " MiB of device memory";
  }
  DeviceArray a, b, out;
  ASSERT_TRUE(a.allocate(dtype, n, 1).ok());
  ASSERT_TRUE(b.allocate(dtype, n, 1).ok());
  ASSERT_TRUE(out.allocate(dtype, n, 1).ok());
  ASSERT_TRUE(testing::fill_hashed(a.data(), dtype, n, 11, nullptr).ok());
  ASSERT_TRUE(testing::fill_hashed(b.data(), dtype, n, 12, nullptr).ok());
  ASSERT_TRUE(out.poison(nullptr).ok());
  ASSERT_TRUE(add(a.data(), b.data(), out.data(), n, dtype, nullptr).ok());
  HostArray got;
  ASSERT_TRUE(out.download(&got, nullptr).ok());

  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<int64_t> bad{0};
  std::atomic<int64_t> first_bad{n};
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      const int64_t begin = n * w / workers, end = n * (w + 1) / workers;
      const uint16_t* bits = static_cast<const uint16_t*>(got.data());
      for (int64_t i = begin; i < end; ++i) {
        const double x =
            ref::half_bits_to_float(ref::float_to_half_bits(testing::hashed_value(11, i)));
        const double y =
            ref::half_bits_to_float(ref::float_to_half_bits(testing::hashed_value(12, i)));
        const double want = x + y;
        const double value = ref::half_bits_to_float(bits[i]);
        if (!(std::fabs(value - want) <= 0x1.0p-10 * std::fmax(std::fabs(want), 0x1.0p-14))) {
          bad.fetch_add(1);
          int64_t seen = first_bad.load();
          while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
          }
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(bad.load(), 0) << "first wrong element at index " << first_bad.load();
}

}  // namespace
}  // namespace cudaops
