// The public top-k entry points: every argument is checked before anything is launched.
#include <sstream>

#include "core/dispatch.cuh"
#include "core/validate.h"
#include "cudaops/topk.h"
#include "topk/topk_plan.h"

namespace cudaops {
namespace {

constexpr const char* kOp = "topk";

Status invalid(const std::string& text) {
  return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": " + text);
}

Status check_sizes(int64_t rows, int64_t cols, int64_t k) {
  if (Status s = detail::check_count(kOp, "rows", rows); !s.ok()) return s;
  if (Status s = detail::check_count(kOp, "cols", cols); !s.ok()) return s;
  if (cols > kTopkMaxCols) {
    return invalid("cols " + std::to_string(cols) + " is above the largest supported, 2^24 (" +
                   std::to_string(kTopkMaxCols) + ")");
  }
  if (k < 1 || k > kTopkMaxK) {
    return invalid("k must be in [1, " + std::to_string(kTopkMaxK) + "], got " + std::to_string(k));
  }
  if (k > cols) {
    return invalid("k (" + std::to_string(k) + ") must be <= cols (" + std::to_string(cols) + ")");
  }
  // The workspace grows with rows (a row's share is at most its one-row plan): it must fit in
  // 2^62 bytes, so that neither the size query nor the offsets into it wrap.
  if (rows > (int64_t{1} << 20)) {
    const auto per_row = static_cast<int64_t>(detail::topk::make_plan(1, cols, k).workspace_bytes);
    if (per_row > 0 && rows > (int64_t{1} << 62) / per_row) {
      return invalid("rows (" + std::to_string(rows) + ") x cols (" + std::to_string(cols) +
                     ") with k " + std::to_string(k) +
                     " needs a workspace of more than 2^62 bytes");
    }
  }
  return Status();
}

}  // namespace

Status topk_workspace_size(int64_t rows, int64_t cols, int64_t k, DType dtype, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes must not be null");
  if (Status s = check_sizes(rows, cols, k); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  *bytes = rows == 0 ? 0 : detail::topk::make_plan(rows, cols, k).workspace_bytes;
  return Status();
}

Status topk(ConstMatrixRef x, MatrixRef values, MatrixRef indices, int64_t rows, int64_t cols,
            int64_t k, DType dtype, const TopkOptions& options, void* d_workspace,
            size_t workspace_bytes, cudaStream_t stream) {
  if (Status s = check_sizes(rows, cols, k); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (options.index_dtype != DType::kInt64 && options.index_dtype != DType::kInt32) {
    std::ostringstream text;
    text << kOp << ": index_dtype " << dtype_name(options.index_dtype) << " ("
         << static_cast<int>(options.index_dtype) << ") is not supported; expected int64 or int32";
    return Status(StatusCode::kUnsupportedDtype, text.str());
  }
  using detail::check_matrix;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) {
    return s;
  }
  if (Status s = check_matrix(kOp, "values", values.data, values.row_stride, rows, k, dtype, "k");
      !s.ok()) {
    return s;
  }
  if (Status s = check_matrix(kOp, "indices", indices.data, indices.row_stride, rows, k,
                              options.index_dtype, "k");
      !s.ok()) {
    return s;
  }
  if (rows == 0) return Status();
  // Planned once: the launches follow the same plan.
  const detail::topk::Plan plan = detail::topk::make_plan(rows, cols, k);
  const size_t needed = plan.workspace_bytes;
  if (Status s = detail::check_overlaps(
          kOp, {detail::matrix_region("x", x.data, x.row_stride, rows, cols, dtype, false),
                detail::matrix_region("values", values.data, values.row_stride, rows, k, dtype,
                                      true, false),
                detail::matrix_region("indices", indices.data, indices.row_stride, rows, k,
                                      options.index_dtype, true, false),
                detail::byte_region("d_workspace", d_workspace, needed, true)});
      !s.ok())
    return s;
  if (needed > 0) {
    if (workspace_bytes < needed) {
      std::ostringstream text;
      text << kOp << ": workspace_bytes " << workspace_bytes << " is below the " << needed
           << " bytes topk_workspace_size gives for rows " << rows << ", cols " << cols << ", k "
           << k;
      return Status(StatusCode::kWorkspaceTooSmall, text.str());
    }
    if (d_workspace == nullptr) return invalid("d_workspace must not be null");
    if (reinterpret_cast<uintptr_t>(d_workspace) % 16 != 0) {
      std::ostringstream text;
      text << kOp << ": d_workspace (" << d_workspace << ") must be aligned to 16 bytes";
      return Status(StatusCode::kMisaligned, text.str());
    }
  }
  return detail::dispatch_float(kOp, dtype, [&](auto tag) {
    return detail::topk::run_typed<decltype(tag)>(kOp, plan, x, values, indices, rows, options,
                                                  d_workspace, stream);
  });
}

Status topk_workspace_size(const RowShape& shape, int64_t k, size_t* bytes) {
  return topk_workspace_size(shape.rows, shape.cols, k, shape.dtype, bytes);
}

Status topk(const TopkArgs& args, const RowShape& shape, Workspace workspace, cudaStream_t stream) {
  return topk(args.x, args.values, args.indices, shape.rows, shape.cols, args.k, shape.dtype,
              args.options, workspace.data, workspace.bytes, stream);
}

}  // namespace cudaops
