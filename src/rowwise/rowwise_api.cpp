// The row-wise ops' argument-struct entry points: each forwards to the positional form, which
// checks every argument (softmax_api.cu, norm_api.cpp).
#include "cudaops/rowwise.h"

namespace cudaops {

Status softmax(const SoftmaxArgs& args, const RowShape& shape, cudaStream_t stream) {
  return softmax(args.x, args.y, shape.rows, shape.cols, shape.dtype, stream);
}

Status softmax_backward(const SoftmaxBackwardArgs& args, const RowShape& shape,
                        cudaStream_t stream) {
  return softmax_backward(args.y, args.dy, args.dx, shape.rows, shape.cols, shape.dtype, stream);
}

Status layer_norm(const LayerNormArgs& args, const RowShape& shape, cudaStream_t stream) {
  return layer_norm(args.x, args.d_weight, args.d_bias, args.y, args.d_mean, args.d_rstd,
                    shape.rows, shape.cols, args.eps, shape.dtype, stream);
}

Status rms_norm(const RmsNormArgs& args, const RowShape& shape, cudaStream_t stream) {
  return rms_norm(args.x, args.d_weight, args.y, args.d_rstd, shape.rows, shape.cols, args.eps,
                  shape.dtype, stream);
}

Status fused_add_rms_norm(const FusedAddRmsNormArgs& args, const RowShape& shape,
                          cudaStream_t stream) {
  return fused_add_rms_norm(args.x, args.residual, args.d_weight, shape.rows, shape.cols, args.eps,
                            shape.dtype, stream);
}

}  // namespace cudaops
