// attention_merge's argument checks (no GPU: a check that reached the device would fail) and its
// reference: merging parts is the attention over their union.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cudaops/attention.h"
#include "reference/attention.h"
#include "status_assertions.h"

namespace cudaops {
namespace {

using testing::FailsWith;
using testing::fake;

TEST(AttentionMergeValidation, Arguments) {
  const void* outs = fake(0x10000000);
  const auto* lses = static_cast<const float*>(fake(0x20000000));
  void* out = fake(0x30000000);
  auto* lse = static_cast<float*>(fake(0x40000000));
  EXPECT_TRUE(FailsWith(attention_merge(outs, lses, out, lse, -1, 4, 8, DType::kFloat16, nullptr),
                        StatusCode::kInvalidArgument, {"attention_merge", "parts", "-1"}));
  EXPECT_TRUE(FailsWith(attention_merge(outs, lses, out, lse, 0, 4, 8, DType::kFloat16, nullptr),
                        StatusCode::kInvalidArgument, {"parts must be >= 1"}));
  EXPECT_TRUE(FailsWith(attention_merge(outs, lses, out, lse, 2, 4, 8, DType::kInt32, nullptr),
                        StatusCode::kUnsupportedDtype, {"dtype int32"}));
  EXPECT_TRUE(FailsWith(attention_merge(nullptr, lses, out, lse, 2, 4, 8, DType::kFloat16, nullptr),
                        StatusCode::kInvalidArgument, {"d_outs"}));
  EXPECT_TRUE(
      FailsWith(attention_merge(outs, lses, nullptr, lse, 2, 4, 8, DType::kFloat16, nullptr),
                StatusCode::kInvalidArgument, {"d_out"}));
  EXPECT_TRUE(FailsWith(
      attention_merge(outs, lses, fake(0x30000001), lse, 2, 4, 8, DType::kFloat16, nullptr),
      StatusCode::kMisaligned, {"d_out"}));
  // The output inside the inputs.
  EXPECT_TRUE(FailsWith(
      attention_merge(outs, lses, fake(0x10000010), lse, 2, 4, 8, DType::kFloat16, nullptr),
      StatusCode::kInvalidArgument, {"d_outs", "d_out", "overlap"}));
  const int64_t huge = int64_t{1} << 40;
  EXPECT_TRUE(
      FailsWith(attention_merge(outs, lses, out, lse, huge, huge, 8, DType::kFloat16, nullptr),
                StatusCode::kInvalidArgument, {"overflows"}));
  // No rows: nothing to do, nothing touched.
  EXPECT_TRUE(
      attention_merge(nullptr, nullptr, nullptr, nullptr, 0, 0, 8, DType::kFloat16, nullptr).ok());
}

TEST(AttentionMergeReference, PartsOfOneSoftmax) {
  // Scores over 10 tokens split into parts of 3, 0 and 7 tokens: merged, the attention over all.
  const std::vector<double> scores = {0.5, -1.0, 2.0, 0.1, 0.3, -0.2, 1.5, 0.0, -3.0, 0.7};
  const std::vector<double> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto attend = [&](size_t begin, size_t end, double* o, double* l) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0.0, acc = 0.0;
    for (size_t i = begin; i < end; ++i)
      m = std::max(m, scores[i]);
    for (size_t i = begin; i < end; ++i) {
      sum += std::exp(scores[i] - m);
      acc += std::exp(scores[i] - m) * values[i];
    }
    *o = sum > 0 ? acc / sum : 0.0;
    *l = sum > 0 ? m + std::log(sum) : -std::numeric_limits<double>::infinity();
  };
  double o[3], l[3], all_o, all_l;
  attend(0, 3, &o[0], &l[0]);
  attend(3, 3, &o[1], &l[1]);
  attend(3, 10, &o[2], &l[2]);
  attend(0, 10, &all_o, &all_l);
  ref::HostArray outs(DType::kFloat32, 3);
  for (int p = 0; p < 3; ++p)
    outs.set(p, o[p]);
  std::vector<double> out, lse;
  ref::attention_merge(outs, {l[0], l[1], l[2]}, 3, 1, 1, &out, &lse);
  EXPECT_NEAR(out[0], all_o, 1e-6);
  EXPECT_NEAR(lse[0], all_l, 1e-12);
}

}  // namespace
}  // namespace cudaops
