#pragma once

// Double-precision references of the row-wise ops (softmax, layernorm, rmsnorm, fused residual-add
// + rmsnorm), forward and backward. Inputs are read exactly as stored; statistics are exact in
// double. Outputs are dense rows x cols (no row stride), whatever the inputs' strides.
#include <cstdint>
#include <vector>

#include "reference/compare.h"
#include "reference/host_array.h"

namespace cudaops::ref {

/// rows x cols, row i starting at element i * row_stride (row_stride >= cols).
struct RowShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};

/// y = exp(x - max) / sum(exp(x - max)) along each row. A row whose entries are all -inf gives NaN
/// (as torch.softmax does); NaN anywhere in a row gives NaN for the whole row.
std::vector<double> softmax(const HostArray& x, RowShape shape);

/// dx = y * (dy - sum(dy * y)) along each row; y and dy share `shape`.
std::vector<double> softmax_backward(const HostArray& y, const HostArray& dy, RowShape shape);

struct NormForward {
  std::vector<double> y;     ///< rows x cols
  std::vector<double> mean;  ///< rows (layernorm only)
  std::vector<double> rstd;  ///< rows: 1 / sqrt(var + eps), or 1 / sqrt(mean(x^2) + eps)
};

/// y = (x - mean) * rstd * weight + bias, with the biased variance (divided by cols).
NormForward layer_norm(const HostArray& x, const HostArray& weight, const HostArray& bias,
                       RowShape shape, double eps);

/// y = x * rstd * weight.
NormForward rms_norm(const HostArray& x, const HostArray& weight, RowShape shape, double eps);

struct NormBackward {
  std::vector<double> dx;       ///< rows x cols
  std::vector<double> dweight;  ///< cols
  std::vector<double> dbias;    ///< cols (layernorm only)
};

/// Gradients of layer_norm given the forward's mean and rstd (as the op stores them, float32).
NormBackward layer_norm_backward(const HostArray& dy, const HostArray& x, const HostArray& weight,
                                 const std::vector<float>& mean, const std::vector<float>& rstd,
                                 RowShape shape);

/// Gradients of rms_norm given the forward's rstd (float32).
NormBackward rms_norm_backward(const HostArray& dy, const HostArray& x, const HostArray& weight,
                               const std::vector<float>& rstd, RowShape shape);

struct FusedAddRmsNorm {
  std::vector<double> residual;  ///< rows x cols: x + residual, rounded to the dtype (as stored)
  std::vector<double> y;         ///< rows x cols: rms_norm of that stored residual
};

/// residual += x (rounded to the dtype); x = rms_norm(residual) * weight. Both arrays use `shape`.
FusedAddRmsNorm fused_add_rms_norm(const HostArray& x, const HostArray& residual,
                                   const HostArray& weight, RowShape shape, double eps);

/// What a row-wise result is, for its tolerance.
enum class RowwiseResult {
  kValues,         ///< forward outputs (y, the fused residual): float32 arithmetic, one rounding
  kStatistics,     ///< mean and rstd, float32
  kGradient,       ///< dx: differences of nearly equal terms, judged against the largest value
  kParamGradient,  ///< dweight, dbias: float32 sums over every row
};

/// The tolerance of a row-wise result of dtype against its double-precision reference `want`:
/// one rounding to the dtype plus the float32 arithmetic, relative, with values far below the
/// largest magnitude in `want` (or `term_scale`, the largest term a gradient is the difference
/// of, when larger) judged against a floor proportional to it.
Tolerance rowwise_tolerance(DType dtype, RowwiseResult kind, const std::vector<double>& want,
                            double term_scale = 0.0);

/// The rows x cols elements of a matrix stored with shape.row_stride, densely.
HostArray dense_rows(const HostArray& a, RowShape shape);

/// Number of elements between the rows (columns cols to row_stride - 1 of each row but the last)
/// whose bytes are not all 0xff: what an op writing only its rows leaves in a poisoned buffer.
int64_t touched_gap_elements(const HostArray& a, RowShape shape);

}  // namespace cudaops::ref
