#include "reference/rowwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace cudaops::ref {

namespace {

double at(const HostArray& a, RowShape s, int64_t row, int64_t col) {
  return a.get(row * s.row_stride + col);
}

}  // namespace

std::vector<double> softmax(const HostArray& x, RowShape s) {
  std::vector<double> y(static_cast<size_t>(s.rows * s.cols));
  for (int64_t r = 0; r < s.rows; ++r) {
    double max = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double v = at(x, s, r, c);
      if (std::isnan(v)) nan = true;
      if (v > max) max = v;
    }
    double sum = 0.0;
    for (int64_t c = 0; c < s.cols; ++c)
      sum += std::exp(at(x, s, r, c) - max);
    for (int64_t c = 0; c < s.cols; ++c) {
      // exp(-inf - -inf) is NaN: an all -inf row gives NaN, as intended.
      y[r * s.cols + c] =
          nan ? std::numeric_limits<double>::quiet_NaN() : std::exp(at(x, s, r, c) - max) / sum;
    }
  }
  return y;
}

std::vector<double> softmax_backward(const HostArray& y, const HostArray& dy, RowShape s) {
  std::vector<double> dx(static_cast<size_t>(s.rows * s.cols));
  for (int64_t r = 0; r < s.rows; ++r) {
    double dot = 0.0;
    for (int64_t c = 0; c < s.cols; ++c)
      dot += at(dy, s, r, c) * at(y, s, r, c);
    for (int64_t c = 0; c < s.cols; ++c) {
      dx[r * s.cols + c] = at(y, s, r, c) * (at(dy, s, r, c) - dot);
    }
  }
  return dx;
}

NormForward layer_norm(const HostArray& x, const HostArray& weight, const HostArray& bias,
                       RowShape s, double eps) {
  NormForward out;
  out.y.resize(static_cast<size_t>(s.rows * s.cols));
  out.mean.resize(static_cast<size_t>(s.rows));
  out.rstd.resize(static_cast<size_t>(s.rows));
  for (int64_t r = 0; r < s.rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < s.cols; ++c)
      sum += at(x, s, r, c);
    const double mean = sum / static_cast<double>(s.cols);
    double var = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double d = at(x, s, r, c) - mean;
      var += d * d;
    }
    var /= static_cast<double>(s.cols);
    const double rstd = 1.0 / std::sqrt(var + eps);
    out.mean[r] = mean;
    out.rstd[r] = rstd;
    for (int64_t c = 0; c < s.cols; ++c) {
      out.y[r * s.cols + c] = (at(x, s, r, c) - mean) * rstd * weight.get(c) + bias.get(c);
    }
  }
  return out;
}

NormForward rms_norm(const HostArray& x, const HostArray& weight, RowShape s, double eps) {
  NormForward out;
  out.y.resize(static_cast<size_t>(s.rows * s.cols));
  out.rstd.resize(static_cast<size_t>(s.rows));
  for (int64_t r = 0; r < s.rows; ++r) {
    double squares = 0.0;
    for (int64_t c = 0; c < s.cols; ++c)
      squares += at(x, s, r, c) * at(x, s, r, c);
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(s.cols) + eps);
    out.rstd[r] = rstd;
    for (int64_t c = 0; c < s.cols; ++c) {
      out.y[r * s.cols + c] = at(x, s, r, c) * rstd * weight.get(c);
    }
  }
  return out;
}

NormBackward layer_norm_backward(const HostArray& dy, const HostArray& x, const HostArray& weight,
                                 const std::vector<float>& mean, const std::vector<float>& rstd,
                                 RowShape s) {
  // With xhat = (x - mean) * rstd and g = dy * weight:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dweight = sum dy * xhat, dbias = sum dy.
  NormBackward out;
  out.dx.resize(static_cast<size_t>(s.rows * s.cols));
  out.dweight.assign(static_cast<size_t>(s.cols), 0.0);
  out.dbias.assign(static_cast<size_t>(s.cols), 0.0);
  const double n = static_cast<double>(s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    const double m = mean[r];
    const double rs = rstd[r];
    double mean_g = 0.0;
    double mean_gx = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double xhat = (at(x, s, r, c) - m) * rs;
      const double g = at(dy, s, r, c) * weight.get(c);
      mean_g += g;
      mean_gx += g * xhat;
      out.dweight[c] += at(dy, s, r, c) * xhat;
      out.dbias[c] += at(dy, s, r, c);
    }
    mean_g /= n;
    mean_gx /= n;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double xhat = (at(x, s, r, c) - m) * rs;
      const double g = at(dy, s, r, c) * weight.get(c);
      out.dx[r * s.cols + c] = rs * (g - mean_g - xhat * mean_gx);
    }
  }
  return out;
}

NormBackward rms_norm_backward(const HostArray& dy, const HostArray& x, const HostArray& weight,
                               const std::vector<float>& rstd, RowShape s) {
  // With xhat = x * rstd and g = dy * weight: dx = rstd * (g - xhat * mean(g * xhat)),
  // dweight = sum dy * xhat.
  NormBackward out;
  out.dx.resize(static_cast<size_t>(s.rows * s.cols));
  out.dweight.assign(static_cast<size_t>(s.cols), 0.0);
  const double n = static_cast<double>(s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    const double rs = rstd[r];
    double mean_gx = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double xhat = at(x, s, r, c) * rs;
      mean_gx += at(dy, s, r, c) * weight.get(c) * xhat;
      out.dweight[c] += at(dy, s, r, c) * xhat;
    }
    mean_gx /= n;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double xhat = at(x, s, r, c) * rs;
      out.dx[r * s.cols + c] = rs * (at(dy, s, r, c) * weight.get(c) - xhat * mean_gx);
    }
  }
  return out;
}

FusedAddRmsNorm fused_add_rms_norm(const HostArray& x, const HostArray& residual,
                                   const HostArray& weight, RowShape s, double eps) {
  // The sum is stored in the dtype, and the norm is taken of what is stored.
  HostArray sum(residual.dtype(), s.rows * s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      // The op adds in float32 and rounds once to the dtype.
      const float v =
          static_cast<float>(at(x, s, r, c)) + static_cast<float>(at(residual, s, r, c));
      sum.set(r * s.cols + c, static_cast<double>(v));
    }
  }
  FusedAddRmsNorm out;
  out.residual = sum.to_double();
  out.y = rms_norm(sum, weight, RowShape{s.rows, s.cols, s.cols}, eps).y;
  return out;
}

Tolerance rowwise_tolerance(DType dtype, RowwiseResult kind, const std::vector<double>& want,
                            double term_scale) {
  double largest = term_scale;
  for (double v : want) {
    if (std::isfinite(v)) largest = std::max(largest, std::fabs(v));
  }
  const Tolerance rounding =
      rounding_tolerance(kind == RowwiseResult::kStatistics ? DType::kFloat32 : dtype);
  // Relative: one rounding to the dtype plus a few float32 roundings and the approximate
  // exp/rsqrt. Values far below the largest carry the absolute error of the float32 sums and
  // differences they come from, and the dtype's subnormals have absolute spacing: below the floor
  // the error is judged against it.
  double arithmetic = 0x1.0p-19;
  double floor_fraction = 0x1.0p-4;
  switch (kind) {
    case RowwiseResult::kValues:
      floor_fraction = 0x1.0p-2;
      break;
    case RowwiseResult::kStatistics:
      arithmetic = 0x1.0p-18;
      floor_fraction = 0x1.0p-2;
      break;
    case RowwiseResult::kGradient:
      arithmetic = 0x1.0p-16;
      break;
    case RowwiseResult::kParamGradient:
      arithmetic = 0x1.0p-14;
      break;
  }
  const double rel = rounding.rel + arithmetic;
  const double floor = std::max(largest * floor_fraction, rounding.floor);
  return {rel, floor};
}

HostArray dense_rows(const HostArray& a, RowShape s) {
  HostArray out(a.dtype(), s.rows * s.cols);
  const int64_t size = dtype_size(a.dtype());
  const auto* src = static_cast<const unsigned char*>(a.data());
  auto* dst = static_cast<unsigned char*>(out.data());
  for (int64_t r = 0; r < s.rows; ++r) {
    std::memcpy(dst + r * s.cols * size, src + r * s.row_stride * size,
                static_cast<size_t>(s.cols * size));
  }
  return out;
}

int64_t touched_gap_elements(const HostArray& a, RowShape s) {
  const int64_t size = dtype_size(a.dtype());
  const auto* bytes = static_cast<const unsigned char*>(a.data());
  int64_t touched = 0;
  for (int64_t r = 0; r + 1 < s.rows; ++r) {
    for (int64_t c = s.cols; c < s.row_stride; ++c) {
      const unsigned char* e = bytes + (r * s.row_stride + c) * size;
      if (std::any_of(e, e + size, [](unsigned char b) { return b != 0xff; })) ++touched;
    }
  }
  return touched;
}

}  // namespace cudaops::ref
