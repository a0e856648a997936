#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "reference/compare.h"
#include "reference/elementwise.h"
#include "reference/host_array.h"

namespace cudaops::ref {
namespace {

constexpr DType kFloatDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

HostArray make(DType dtype, const std::vector<double>& values) {
  HostArray a(dtype, static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i)
    a.set(static_cast<int64_t>(i), values[i]);
  return a;
}

TEST(HostArray, StoresEachDtype) {
  HostArray f(DType::kFloat32, 2);
  f.set(0, 0.1);
  EXPECT_EQ(f.get(0), static_cast<double>(0.1f));
  HostArray h(DType::kFloat16, 1);
  h.set(0, 0.1);
  EXPECT_NEAR(h.get(0), 0.1, 0.1 * 0x1.0p-11);
  EXPECT_NE(h.get(0), static_cast<double>(0.1f));
  HostArray b(DType::kBFloat16, 1);
  b.set(0, 3.0);
  EXPECT_EQ(b.get(0), 3.0);
  HostArray i(DType::kInt64, 1);
  i.set(0, 1e15);
  EXPECT_EQ(i.get(0), 1e15);
  HostArray j(DType::kInt32, 1);
  j.set(0, -7);
  EXPECT_EQ(j.get(0), -7.0);
  EXPECT_EQ(h.size_bytes(), 2);
  EXPECT_EQ(i.size_bytes(), 8);
}

TEST(FillRandom, NeverZeroBoundedAndSeeded) {
  for (DType dtype : kFloatDtypes) {
    HostArray a(dtype, 10000);
    HostArray b(dtype, 10000);
    HostArray c(dtype, 10000);
    fill_random(a, 1);
    fill_random(b, 1);
    fill_random(c, 2);
    int negative = 0;
    int differ = 0;
    for (int64_t i = 0; i < a.size(); ++i) {
      const double v = a.get(i);
      EXPECT_GE(std::fabs(v), 0.5) << i;
      EXPECT_LE(std::fabs(v), 2.0) << i;
      EXPECT_EQ(v, b.get(i));
      negative += v < 0;
      differ += v != c.get(i);
    }
    EXPECT_GT(negative, 4000);
    EXPECT_LT(negative, 6000);
    EXPECT_GT(differ, 9000);
  }
}

TEST(ElementwiseReference, AddAndAddScalar) {
  const HostArray a = make(DType::kFloat32, {1.5, -2.0, 0.25});
  const HostArray b = make(DType::kFloat32, {0.5, 2.0, -1.0});
  EXPECT_EQ(add(a, b), (std::vector<double>{2.0, 0.0, -0.75}));
  const float alpha = 0.1f;
  const std::vector<double> s = add_scalar(a, alpha);
  EXPECT_EQ(s[0], 1.5 + static_cast<double>(alpha));  // alpha taken as float32
  EXPECT_EQ(s[2], 0.25 + static_cast<double>(alpha));
}

TEST(Compare, AcceptsOneRoundingPerDtype) {
  for (DType dtype : kFloatDtypes) {
    std::vector<double> want;
    for (int i = 0; i < 1000; ++i)
      want.push_back(0.37 + i * 0.013);
    const HostArray got = make(dtype, want);  // each value rounded once
    const CompareResult r = compare(got, want, rounding_tolerance(dtype));
    EXPECT_TRUE(r.ok()) << dtype_name(dtype) << ": " << r.describe();
    EXPECT_GT(r.max_error, 0.0);
  }
}

TEST(Compare, RejectsTwoUlpsAndNamesTheFirstMismatch) {
  std::vector<double> want = {1.0, 1.0, 1.0, 1.0};
  HostArray got = make(DType::kFloat16, want);
  got.set(2, 1.0 + 2 * 0x1.0p-10);
  got.set(3, 1.0 + 3 * 0x1.0p-10);
  const CompareResult r = compare(got, want, rounding_tolerance(DType::kFloat16));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.first_mismatch, 2);
  EXPECT_EQ(r.worst_index, 3);
  EXPECT_NE(r.describe().find("index 2"), std::string::npos) << r.describe();
}

TEST(Compare, NanAndInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tolerance tol = rounding_tolerance(DType::kFloat32);
  EXPECT_TRUE(compare(make(DType::kFloat32, {nan, inf, -inf}), {nan, inf, -inf}, tol).ok());
  EXPECT_FALSE(compare(make(DType::kFloat32, {nan}), {1.0}, tol).ok());  // poison left behind
  EXPECT_FALSE(compare(make(DType::kFloat32, {1.0}), {nan}, tol).ok());
  EXPECT_FALSE(compare(make(DType::kFloat32, {inf}), {-inf}, tol).ok());
  EXPECT_FALSE(compare(make(DType::kFloat32, {1e30}), {inf}, tol).ok());
  EXPECT_FALSE(compare(make(DType::kFloat32, {inf}), {1e30}, tol).ok());
}

TEST(Compare, SmallValuesAreJudgedAgainstTheFloor) {
  const Tolerance tol = rounding_tolerance(DType::kFloat16);
  // A float16 subnormal off by one unit is within one ulp of the smallest normal.
  EXPECT_TRUE(compare(make(DType::kFloat16, {0x1.0p-24}), {0.0}, tol).ok());
  EXPECT_FALSE(compare(make(DType::kFloat16, {0x1.0p-12}), {0.0}, tol).ok());
}

TEST(Compare, SizeMismatch) {
  const CompareResult r = compare(make(DType::kFloat32, {1.0}), {1.0, 2.0}, {});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.describe().find("length"), std::string::npos);
}

}  // namespace
}  // namespace cudaops::ref
