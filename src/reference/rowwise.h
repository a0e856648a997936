#pragma once

// Double-precision references of the row-wise ops (softmax, layernorm, rmsnorm, fused residual-add
// + rmsnorm), forward and backward. Inputs are read exactly as stored; statistics are exact in
// double. Outputs are dense rows x cols (no row stride), whatever the inputs' strides.
#include <cstdint>
#include <vector>

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

}  // namespace cudaops::ref
