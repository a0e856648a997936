// The row-wise references checked against properties of the math and, for the backward passes,
// against central differences of the forward references. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "reference/rowwise.h"

namespace cudaops::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

HostArray random_array(int64_t size, uint64_t seed, DType dtype = DType::kFloat32) {
  HostArray a(dtype, size);
  fill_random(a, seed);
  return a;
}

// d/dv of sum(dy * f(v)) at element `i` of `v`, by a central difference. float32 storage holds
// v +- h exactly for |v| in [0.5, 2) and h = 2^-12.
double numeric_gradient(HostArray& v, int64_t i, const std::vector<double>& dy,
                        const std::function<std::vector<double>()>& f) {
  const double h = std::ldexp(1.0, -12);
  const double v0 = v.get(i);
  auto loss = [&] {
    std::vector<double> y = f();
    double sum = 0.0;
    for (size_t k = 0; k < y.size(); ++k)
      sum += dy[k] * y[k];
    return sum;
  };
  v.set(i, v0 + h);
  const double plus = loss();
  v.set(i, v0 - h);
  const double minus = loss();
  v.set(i, v0);
  return (plus - minus) / (2 * h);
}

void expect_near_relative(double got, double expected, double tolerance, const char* what,
                          int64_t i) {
  EXPECT_NEAR(got, expected, tolerance * std::max(1.0, std::fabs(expected))) << what << " at " << i;
}

TEST(SoftmaxReference, RowsSumToOneAndShiftDoesNotMatter) {
  const RowShape s{3, 37, 40};
  // bfloat16 values, so that x + 8 is exact in float32.
  const HostArray narrow = random_array(s.rows * s.row_stride, 1, DType::kBFloat16);
  HostArray x(DType::kFloat32, narrow.size());
  HostArray shifted(DType::kFloat32, narrow.size());
  for (int64_t i = 0; i < x.size(); ++i) {
    x.set(i, narrow.get(i));
    shifted.set(i, narrow.get(i) + 8.0);
  }
  const std::vector<double> y = softmax(x, s);
  const std::vector<double> ys = softmax(shifted, s);
  for (int64_t r = 0; r < s.rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      sum += y[r * s.cols + c];
      EXPECT_NEAR(y[r * s.cols + c], ys[r * s.cols + c], 1e-12);
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
}

TEST(SoftmaxReference, InfinitiesEqualRowsAndLargeMagnitudes) {
  const RowShape s{4, 4, 4};
  HostArray x(DType::kFloat32, 16);
  const double rows[4][4] = {{1.0, -kInf, 1.0, -kInf},
                             {-kInf, -kInf, -kInf, -kInf},
                             {3.0, 3.0, 3.0, 3.0},
                             {1e30, -1e30, 1e30, 0.0}};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c)
      x.set(r * 4 + c, rows[r][c]);
  }
  const std::vector<double> y = softmax(x, s);
  EXPECT_EQ(y[0], 0.5);
  EXPECT_EQ(y[1], 0.0);
  for (int c = 0; c < 4; ++c)
    EXPECT_TRUE(std::isnan(y[4 + c]));
  for (int c = 0; c < 4; ++c)
    EXPECT_EQ(y[8 + c], 0.25);
  EXPECT_EQ(y[12], 0.5);
  EXPECT_EQ(y[13], 0.0);
  EXPECT_EQ(y[15], 0.0);
}

TEST(SoftmaxReference, BackwardMatchesCentralDifferences) {
  const RowShape s{2, 9, 11};
  HostArray x = random_array(s.rows * s.row_stride, 2);
  const std::vector<double> dy_values = random_array(s.rows * s.cols, 3).to_double();
  HostArray y(DType::kFloat32, s.rows * s.row_stride);
  HostArray dy(DType::kFloat32, s.rows * s.row_stride);
  const std::vector<double> yv = softmax(x, s);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      y.set(r * s.row_stride + c, yv[r * s.cols + c]);
      dy.set(r * s.row_stride + c, dy_values[r * s.cols + c]);
    }
  }
  const std::vector<double> dx = softmax_backward(y, dy, s);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const double numeric =
          numeric_gradient(x, r * s.row_stride + c, dy_values, [&] { return softmax(x, s); });
      // y was rounded to float32 for the backward: about 1e-7 relative.
      expect_near_relative(dx[r * s.cols + c], numeric, 1e-5, "dx", r * s.cols + c);
    }
  }
}

TEST(NormReference, LayerNormStatistics) {
  const RowShape s{5, 199, 256};
  HostArray x = random_array(s.rows * s.row_stride, 4);
  HostArray weight(DType::kFloat32, s.cols);
  HostArray bias(DType::kFloat32, s.cols);
  for (int64_t c = 0; c < s.cols; ++c) {
    weight.set(c, 1.0);
    bias.set(c, 0.0);
  }
  const NormForward f = layer_norm(x, weight, bias, s, 1e-12);
  for (int64_t r = 0; r < s.rows; ++r) {
    double sum = 0.0;
    double squares = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      sum += f.y[r * s.cols + c];
      squares += f.y[r * s.cols + c] * f.y[r * s.cols + c];
    }
    EXPECT_NEAR(sum / static_cast<double>(s.cols), 0.0, 1e-12);
    EXPECT_NEAR(squares / static_cast<double>(s.cols), 1.0, 1e-9);
  }
}

TEST(NormReference, RmsNormOfAConstantRowIsTheWeight) {
  const RowShape s{1, 8, 8};
  HostArray x(DType::kBFloat16, 8);
  HostArray weight = random_array(8, 5, DType::kBFloat16);
  for (int64_t c = 0; c < 8; ++c)
    x.set(c, -3.0);
  const NormForward f = rms_norm(x, weight, s, 0.0);
  for (int64_t c = 0; c < 8; ++c)
    EXPECT_DOUBLE_EQ(f.y[c], -weight.get(c));
  EXPECT_DOUBLE_EQ(f.rstd[0], 1.0 / 3.0);
}

TEST(NormReference, LayerNormBackwardMatchesCentralDifferences) {
  const RowShape s{3, 7, 10};
  HostArray x = random_array(s.rows * s.row_stride, 6);
  HostArray weight = random_array(s.cols, 7);
  HostArray bias = random_array(s.cols, 8);
  HostArray dy(DType::kFloat32, s.rows * s.row_stride);
  const std::vector<double> dy_dense = random_array(s.rows * s.cols, 9).to_double();
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c)
      dy.set(r * s.row_stride + c, dy_dense[r * s.cols + c]);
  }
  const double eps = 1e-5;
  const NormForward f = layer_norm(x, weight, bias, s, eps);
  const std::vector<float> mean(f.mean.begin(), f.mean.end());
  const std::vector<float> rstd(f.rstd.begin(), f.rstd.end());
  const NormBackward b = layer_norm_backward(dy, x, weight, mean, rstd, s);
  auto forward = [&] { return layer_norm(x, weight, bias, s, eps).y; };
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      expect_near_relative(b.dx[r * s.cols + c],
                           numeric_gradient(x, r * s.row_stride + c, dy_dense, forward), 1e-5, "dx",
                           r * s.cols + c);
    }
  }
  for (int64_t c = 0; c < s.cols; ++c) {
    expect_near_relative(b.dweight[c], numeric_gradient(weight, c, dy_dense, forward), 1e-5,
                         "dweight", c);
    expect_near_relative(b.dbias[c], numeric_gradient(bias, c, dy_dense, forward), 1e-5, "dbias",
                         c);
  }
}

TEST(NormReference, RmsNormBackwardMatchesCentralDifferences) {
  const RowShape s{4, 13, 13};
  HostArray x = random_array(s.rows * s.row_stride, 10);
  HostArray weight = random_array(s.cols, 11);
  HostArray dy = random_array(s.rows * s.row_stride, 12);
  const std::vector<double> dy_dense = dy.to_double();
  const double eps = 1e-6;
  const NormForward f = rms_norm(x, weight, s, eps);
  const std::vector<float> rstd(f.rstd.begin(), f.rstd.end());
  const NormBackward b = rms_norm_backward(dy, x, weight, rstd, s);
  auto forward = [&] { return rms_norm(x, weight, s, eps).y; };
  for (int64_t i = 0; i < s.rows * s.cols; ++i) {
    expect_near_relative(b.dx[i], numeric_gradient(x, i, dy_dense, forward), 1e-5, "dx", i);
  }
  for (int64_t c = 0; c < s.cols; ++c) {
    expect_near_relative(b.dweight[c], numeric_gradient(weight, c, dy_dense, forward), 1e-5,
                         "dweight", c);
  }
}

TEST(NormReference, RowStrideGapsAreNeverRead) {
  const RowShape s{3, 5, 9};
  HostArray x = random_array(s.rows * s.row_stride, 13);
  HostArray dense(DType::kFloat32, s.rows * s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c)
      dense.set(r * s.cols + c, x.get(r * s.row_stride + c));
    for (int64_t c = s.cols; c < s.row_stride; ++c) {
      x.set(r * s.row_stride + c, std::numeric_limits<double>::quiet_NaN());
    }
  }
  HostArray weight = random_array(s.cols, 14);
  EXPECT_EQ(rms_norm(x, weight, s, 1e-6).y, rms_norm(dense, weight, {3, 5, 5}, 1e-6).y);
  EXPECT_EQ(softmax(x, s), softmax(dense, {3, 5, 5}));
}

TEST(NormReference, FusedAddRmsNormStoresTheRoundedSumAndNormalisesIt) {
  const RowShape s{2, 33, 40};
  HostArray x = random_array(s.rows * s.row_stride, 15, DType::kFloat16);
  HostArray residual = random_array(s.rows * s.row_stride, 16, DType::kFloat16);
  HostArray weight = random_array(s.cols, 17, DType::kFloat16);
  const FusedAddRmsNorm f = fused_add_rms_norm(x, residual, weight, s, 1e-6);
  HostArray stored(DType::kFloat16, s.rows * s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const double sum = x.get(r * s.row_stride + c) + residual.get(r * s.row_stride + c);
      stored.set(r * s.cols + c, sum);
      EXPECT_EQ(f.residual[r * s.cols + c], stored.get(r * s.cols + c));
    }
  }
  EXPECT_EQ(f.y, rms_norm(stored, weight, {s.rows, s.cols, s.cols}, 1e-6).y);
}

}  // namespace
}  // namespace cudaops::ref
