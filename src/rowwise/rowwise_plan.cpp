// rowwise_plan: which kernel each row-wise op takes for a shape, from the same code that launches
// it (the ops' ladders run without launching).
#include <string>

#include "core/validate.h"
#include "cudaops/rowwise.h"
#include "rowwise/norm_host.h"
#include "rowwise/rowwise_launch.h"

namespace cudaops {
namespace {

using detail::rowwise::CachedConfig;
using detail::rowwise::kCachedLadder;
using detail::rowwise::ParamGradPlan;
using detail::rowwise::RowPath;
using detail::rowwise::RowPlan;

RowwisePlan from_row_plan(const RowPlan& p) {
  RowwisePlan plan;
  plan.path = detail::rowwise::row_path_name(p.path);
  plan.block_threads = p.block_threads;
  plan.row_threads = p.row_threads;
  plan.chunks = p.vecs;
  plan.blocks_per_row = p.parts;
  plan.blocks = p.blocks;
  plan.smem_bytes = p.smem;
  return plan;
}

RowwisePlan from_grad_plan(const ParamGradPlan& p) {
  RowwisePlan plan;
  plan.blocks = p.blocks;
  plan.smem_bytes = p.smem;
  plan.workspace_bytes = p.workspace;
  if (p.blocks == 0) return plan;
  if (p.cached) {
    const CachedConfig shape = kCachedLadder[p.config];
    plan.path = detail::rowwise::row_path_name(RowPath::kCached);
    plan.row_threads = shape.threads;
    plan.block_threads = shape.threads == 32 ? 4 * 32 : shape.threads;
    plan.chunks = shape.vecs;
  } else if (p.part_cols > 0) {
    plan.path = detail::rowwise::row_path_name(RowPath::kLong);
    plan.block_threads = plan.row_threads = p.threads;
    plan.blocks_per_row = p.split;
  } else if (p.split > 0) {
    const CachedConfig shape = detail::rowwise::kBackwardSplitConfig;
    plan.path = detail::rowwise::row_path_name(RowPath::kSplit);
    plan.block_threads = plan.row_threads = shape.threads;
    plan.chunks = shape.vecs;
    plan.blocks_per_row = p.split;
  } else {
    plan.path = detail::rowwise::row_path_name(RowPath::kStreamed);
    plan.block_threads = plan.row_threads = p.threads;
  }
  return plan;
}

}  // namespace

Status rowwise_plan(RowwiseOp op, int64_t rows, int64_t cols, DType dtype, bool aligned,
                    RowwisePlan* plan) {
  constexpr const char* kOp = "rowwise_plan";
  if (plan == nullptr) {
    return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": plan must not be null");
  }
  if (Status s = detail::rowwise::check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  *plan = RowwisePlan();
  if (rows == 0 || cols == 0) return Status();
  RowPlan row;
  Status status;
  switch (op) {
    case RowwiseOp::kSoftmax:
      status = detail::rowwise::softmax_ladder(kOp, {nullptr, cols}, {nullptr, cols}, rows, cols,
                                               dtype, aligned, nullptr, &row);
      break;
    case RowwiseOp::kSoftmaxBackward:
      status = detail::rowwise::softmax_backward_ladder(kOp, {nullptr, cols}, {nullptr, cols},
                                                        {nullptr, cols}, rows, cols, dtype, aligned,
                                                        nullptr, &row);
      break;
    case RowwiseOp::kLayerNorm:
      status =
          plan_norm_forward(kOp, detail::rowwise::Norm::kLayer, rows, cols, dtype, aligned, &row);
      break;
    case RowwiseOp::kRmsNorm:
      status =
          plan_norm_forward(kOp, detail::rowwise::Norm::kRms, rows, cols, dtype, aligned, &row);
      break;
    case RowwiseOp::kFusedAddRmsNorm:
      status =
          plan_norm_forward(kOp, detail::rowwise::Norm::kAddRms, rows, cols, dtype, aligned, &row);
      break;
    case RowwiseOp::kLayerNormBackward:
    case RowwiseOp::kRmsNormBackward: {
      ParamGradPlan grad;
      status = plan_norm_backward(kOp, op == RowwiseOp::kLayerNormBackward, rows, cols, dtype,
                                  aligned, &grad);
      if (status.ok()) *plan = from_grad_plan(grad);
      return status;
    }
    default:
      return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": op " +
                                                      std::to_string(static_cast<int>(op)) +
                                                      " is not a RowwiseOp");
  }
  if (status.ok()) *plan = from_row_plan(row);
  return status;
}

}  // namespace cudaops
