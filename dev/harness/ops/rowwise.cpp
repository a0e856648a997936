// Descriptors of the row-wise ops: softmax, layernorm and rmsnorm (forward and backward) and fused
// residual-add + rmsnorm. Sizes: rows, cols and pad (each matrix's row stride is cols + pad).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cudaops/rowwise.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/rowwise.h"

namespace cudaops::harness {
namespace {

using Kind = RowwiseOp;

constexpr float kLayerNormEps = 1e-5f;
constexpr float kRmsNormEps = 1e-6f;

bool is_backward(Kind kind) {
  return kind == Kind::kSoftmaxBackward || kind == Kind::kLayerNormBackward ||
         kind == Kind::kRmsNormBackward;
}

// Keeps the worst of several comparisons: the first failure, else the largest error.
void merge(ref::CompareResult* total, const ref::CompareResult& next, bool* first) {
  if (*first) {
    *total = next;
    *first = false;
    return;
  }
  if (!total->ok()) return;
  if (!next.ok() || next.max_error > total->max_error) *total = next;
}

ref::CompareResult gap_failure(int64_t touched) {
  ref::CompareResult r;
  r.count = touched;
  r.mismatches = touched;
  r.max_error = INFINITY;
  return r;
}

/// "cached: 4 rows of 32 threads x 4 chunks per block, 1024 blocks" and the like.
std::string describe(const RowwisePlan& plan) {
  std::string text = plan.path;
  if (plan.blocks == 0) return text;
  text += ": ";
  if (plan.blocks_per_row > 1) {
    text += std::to_string(plan.blocks_per_row) + " blocks per row of ";
  } else if (plan.row_threads > 0 && plan.block_threads > plan.row_threads) {
    text += std::to_string(plan.block_threads / plan.row_threads) + " rows per block of ";
  } else {
    text += "blocks of ";
  }
  text += std::to_string(plan.row_threads > 0 ? plan.row_threads : plan.block_threads) + " threads";
  if (plan.chunks > 0) text += " x " + std::to_string(plan.chunks) + " chunks";
  text += ", " + std::to_string(plan.blocks) + " blocks";
  if (plan.smem_bytes > 0) text += ", " + std::to_string(plan.smem_bytes) + " B dynamic shared";
  if (plan.workspace_bytes > 0)
    text += ", " + std::to_string(plan.workspace_bytes) + " B workspace";
  return text;
}

class RowwiseCase : public OpCase {
 public:
  RowwiseCase(Kind kind, const CaseConfig& config) : kind_(kind), config_(config) {}

  std::string launch() const override {
    const int64_t size = dtype_size(config_.dtype);
    // Every matrix starts offset elements past a 256-byte boundary, with the same row stride.
    const bool aligned = (config_.offset * size) % 16 == 0 && (shape_.row_stride * size) % 16 == 0;
    RowwisePlan plan;
    if (!rowwise_plan(kind_, shape_.rows, shape_.cols, config_.dtype, aligned, &plan).ok()) {
      return {};
    }
    return describe(plan);
  }

  Status prepare() {
    const int64_t rows = dim_value(config_.dims, "rows");
    const int64_t cols = dim_value(config_.dims, "cols");
    const int64_t pad = dim_value(config_.dims, "pad");
    if (rows < 0 || cols < 0 || pad < 0) {
      return Status(StatusCode::kInvalidArgument, "rows, cols and pad must be >= 0");
    }
    int64_t span = 0;
    if (pad > (int64_t{1} << 40)) return Status(StatusCode::kInvalidArgument, "pad is too large");
    if (Status s = checked_elements("rowwise op", "rows x (cols + pad)", {rows, cols + pad}, &span);
        !s.ok())
      return s;
    shape_ = {rows, cols, cols + pad};
    const DType dtype = config_.dtype;
    const uint64_t seed = config_.seed * 7919;

    // Inputs: x (or y for softmax_backward), a second matrix (dy or residual) and the weights.
    host_a_ = ref::HostArray(dtype, span);
    ref::fill_random(host_a_, seed);
    if (kind_ == Kind::kSoftmaxBackward) {
      // y is a softmax output, as the backward pass gets it.
      const std::vector<double> y = ref::softmax(host_a_, shape_);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
          host_a_.set(r * shape_.row_stride + c, y[r * cols + c]);
      }
    }
    const bool two_inputs = is_backward(kind_) || kind_ == Kind::kFusedAddRmsNorm;
    if (two_inputs) {
      host_b_ = ref::HostArray(dtype, span);
      ref::fill_random(host_b_, seed + 1);
    }
    const bool weighted = kind_ != Kind::kSoftmax && kind_ != Kind::kSoftmaxBackward;
    const bool layer = kind_ == Kind::kLayerNorm || kind_ == Kind::kLayerNormBackward;
    if (weighted) {
      host_weight_ = ref::HostArray(dtype, cols);
      ref::fill_random(host_weight_, seed + 2);
    }
    if (layer) {
      host_bias_ = ref::HostArray(dtype, cols);
      ref::fill_random(host_bias_, seed + 3);
    }
    // The statistics a backward pass is given: those of the forward, in float32.
    if (kind_ == Kind::kLayerNormBackward || kind_ == Kind::kRmsNormBackward) {
      // x is the second input of the backward passes (dy first).
      const ref::NormForward f =
          kind_ == Kind::kLayerNormBackward
              ? ref::layer_norm(host_b_, host_weight_, host_bias_, shape_, kLayerNormEps)
              : ref::rms_norm(host_b_, host_weight_, shape_, kRmsNormEps);
      host_mean_.assign(f.mean.begin(), f.mean.end());
      host_rstd_.assign(f.rstd.begin(), f.rstd.end());
    }

    Status status = upload(host_a_, &a_);
    if (status.ok() && two_inputs) status = upload(host_b_, &b_);
    if (status.ok() && weighted) status = upload(host_weight_, &weight_);
    if (status.ok() && layer) status = upload(host_bias_, &bias_);
    if (status.ok() && !host_rstd_.empty()) {
      // The backward passes' inputs.
      ref::HostArray mean(DType::kFloat32, rows), rstd(DType::kFloat32, rows);
      for (int64_t r = 0; r < rows; ++r) {
        if (layer) mean.set(r, host_mean_[r]);
        rstd.set(r, host_rstd_[r]);
      }
      if (layer) status = upload(mean, &mean_);
      if (status.ok()) status = upload(rstd, &rstd_);
    } else if (status.ok() && (kind_ == Kind::kLayerNorm || kind_ == Kind::kRmsNorm)) {
      // The forward passes' statistics outputs.
      if (layer) status = mean_.allocate(DType::kFloat32, rows, config_.offset);
      if (status.ok()) status = rstd_.allocate(DType::kFloat32, rows, config_.offset);
    }
    if (status.ok() && kind_ != Kind::kFusedAddRmsNorm) {
      status = out_.allocate(dtype, span, config_.offset);
    }
    if (status.ok() && (kind_ == Kind::kLayerNormBackward || kind_ == Kind::kRmsNormBackward)) {
      status = dweight_.allocate(dtype, cols, config_.offset);
      if (status.ok() && layer) status = dbias_.allocate(dtype, cols, config_.offset);
      size_t bytes = 0;
      if (status.ok()) {
        status = kind_ == Kind::kLayerNormBackward
                     ? layer_norm_backward_workspace_size({rows, cols, dtype}, &bytes)
                     : rms_norm_backward_workspace_size({rows, cols, dtype}, &bytes);
      }
      if (status.ok() && bytes > 0) status = workspace_.allocate(static_cast<int64_t>(bytes));
    }
    return status;
  }

  int64_t bytes_moved() const override {
    const int64_t s = dtype_size(config_.dtype);
    const int64_t matrix = shape_.rows * shape_.cols * s;
    const int64_t vector = shape_.cols * s;
    const int64_t stats = shape_.rows * 4;
    switch (kind_) {
      case Kind::kSoftmax:
        return 2 * matrix;
      case Kind::kSoftmaxBackward:
        return 3 * matrix;
      case Kind::kLayerNorm:
        return 2 * matrix + 2 * vector + 2 * stats;
      case Kind::kRmsNorm:
        return 2 * matrix + vector + stats;
      case Kind::kFusedAddRmsNorm:
        return 4 * matrix + vector;
      case Kind::kLayerNormBackward:
        return 3 * matrix + 3 * vector + 2 * stats;
      case Kind::kRmsNormBackward:
        return 3 * matrix + 2 * vector + stats;
    }
    return 0;
  }

  Status run(cudaStream_t stream) override {
    const int64_t rows = shape_.rows, cols = shape_.cols, ld = shape_.row_stride;
    const DType dtype = config_.dtype;
    const ConstMatrixRef a{a_.data(), ld};
    const ConstMatrixRef b{b_.data(), ld};
    const MatrixRef out{out_.data(), ld};
    auto* mean = static_cast<float*>(mean_.data());
    auto* rstd = static_cast<float*>(rstd_.data());
    switch (kind_) {
      case Kind::kSoftmax:
        return softmax(a, out, rows, cols, dtype, stream);
      case Kind::kSoftmaxBackward:
        return softmax_backward(a, b, out, rows, cols, dtype, stream);
      case Kind::kLayerNorm:
        return layer_norm(a, weight_.data(), bias_.data(), out, mean, rstd, rows, cols,
                          kLayerNormEps, dtype, stream);
      case Kind::kRmsNorm:
        return rms_norm(a, weight_.data(), out, rstd, rows, cols, kRmsNormEps, dtype, stream);
      case Kind::kFusedAddRmsNorm:
        return fused_add_rms_norm(MatrixRef{a_.data(), ld}, MatrixRef{b_.data(), ld},
                                  weight_.data(), rows, cols, kRmsNormEps, dtype, stream);
      case Kind::kLayerNormBackward:
        return layer_norm_backward(
            {a, b, weight_.data(), mean, rstd, out, dweight_.data(), dbias_.data()},
            {rows, cols, dtype}, {workspace_.get(), static_cast<size_t>(workspace_.size_bytes())},
            stream);
      case Kind::kRmsNormBackward:
        return rms_norm_backward(
            {a, b, weight_.data(), rstd, out, dweight_.data()}, {rows, cols, dtype},
            {workspace_.get(), static_cast<size_t>(workspace_.size_bytes())}, stream);
    }
    return Status(StatusCode::kNotSupported, "unknown row-wise op");
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    const DType dtype = config_.dtype;
    Status status;
    if (kind_ == Kind::kFusedAddRmsNorm) {
      // In place: start from the original inputs, whatever earlier runs left.
      status = a_.upload(host_a_, stream);
      if (status.ok()) status = b_.upload(host_b_, stream);
    } else {
      status = out_.poison(stream);
      if (status.ok() && mean_.size() > 0 && !is_backward(kind_)) status = mean_.poison(stream);
      if (status.ok() && rstd_.size() > 0 && !is_backward(kind_)) status = rstd_.poison(stream);
      if (status.ok() && dweight_.size() > 0) status = dweight_.poison(stream);
      if (status.ok() && dbias_.size() > 0) status = dbias_.poison(stream);
    }
    if (status.ok()) status = run(stream);
    if (!status.ok()) return status;

    bool first = true;
    auto compare_matrix = [&](const DeviceArray& array, const std::vector<double>& want,
                              ref::RowwiseResult kind, double term_scale = 0.0) -> Status {
      ref::HostArray got;
      if (Status s = array.download(&got, stream); !s.ok()) return s;
      const int64_t touched = ref::touched_gap_elements(got, shape_);
      if (touched > 0 && kind_ != Kind::kFusedAddRmsNorm) {
        merge(result, gap_failure(touched), &first);
      }
      merge(result,
            ref::compare(ref::dense_rows(got, shape_), want,
                         ref::rowwise_tolerance(dtype, kind, want, term_scale)),
            &first);
      return Status();
    };
    auto compare_vector = [&](const DeviceArray& array, const std::vector<double>& want,
                              ref::RowwiseResult kind) -> Status {
      ref::HostArray got;
      if (Status s = array.download(&got, stream); !s.ok()) return s;
      merge(result, ref::compare(got, want, ref::rowwise_tolerance(array.dtype(), kind, want)),
            &first);
      return Status();
    };
    using R = ref::RowwiseResult;
    switch (kind_) {
      case Kind::kSoftmax:
        return compare_matrix(out_, ref::softmax(host_a_, shape_), R::kValues);
      case Kind::kSoftmaxBackward:
        return compare_matrix(out_, ref::softmax_backward(host_a_, host_b_, shape_), R::kGradient,
                              gradient_scale());
      case Kind::kLayerNorm: {
        const ref::NormForward f =
            ref::layer_norm(host_a_, host_weight_, host_bias_, shape_, kLayerNormEps);
        status = compare_matrix(out_, f.y, R::kValues);
        if (status.ok()) status = compare_vector(mean_, f.mean, R::kStatistics);
        if (status.ok()) status = compare_vector(rstd_, f.rstd, R::kStatistics);
        return status;
      }
      case Kind::kRmsNorm: {
        const ref::NormForward f = ref::rms_norm(host_a_, host_weight_, shape_, kRmsNormEps);
        status = compare_matrix(out_, f.y, R::kValues);
        if (status.ok()) status = compare_vector(rstd_, f.rstd, R::kStatistics);
        return status;
      }
      case Kind::kFusedAddRmsNorm: {
        const ref::FusedAddRmsNorm f =
            ref::fused_add_rms_norm(host_a_, host_b_, host_weight_, shape_, kRmsNormEps);
        status = compare_matrix(b_, f.residual, R::kValues);
        if (status.ok()) status = compare_matrix(a_, f.y, R::kValues);
        return status;
      }
      case Kind::kLayerNormBackward: {
        const ref::NormBackward g = ref::layer_norm_backward(host_a_, host_b_, host_weight_,
                                                             host_mean_, host_rstd_, shape_);
        status = compare_matrix(out_, g.dx, R::kGradient, gradient_scale());
        if (status.ok()) status = compare_vector(dweight_, g.dweight, R::kParamGradient);
        if (status.ok()) status = compare_vector(dbias_, g.dbias, R::kParamGradient);
        return status;
      }
      case Kind::kRmsNormBackward: {
        const ref::NormBackward g =
            ref::rms_norm_backward(host_a_, host_b_, host_weight_, host_rstd_, shape_);
        status = compare_matrix(out_, g.dx, R::kGradient, gradient_scale());
        if (status.ok()) status = compare_vector(dweight_, g.dweight, R::kParamGradient);
        return status;
      }
    }
    return Status();
  }

 private:
  Status upload(const ref::HostArray& host, DeviceArray* device) {
    Status status = device->allocate(host.dtype(), host.size(), config_.offset);
    if (status.ok()) status = device->upload(host, nullptr);
    return status;
  }

  // The largest term the input gradient is a difference of: |y * dy| for softmax, and
  // |rstd * dy * weight| for the norms (for one column, dx is pure cancellation).
  double gradient_scale() const {
    double scale = 0.0;
    for (int64_t r = 0; r < shape_.rows; ++r) {
      for (int64_t c = 0; c < shape_.cols; ++c) {
        const int64_t i = r * shape_.row_stride + c;
        const double t = kind_ == Kind::kSoftmaxBackward
                             ? host_a_.get(i) * host_b_.get(i)
                             : host_rstd_[r] * host_a_.get(i) * host_weight_.get(c);
        scale = std::max(scale, std::fabs(t));
      }
    }
    return scale;
  }

  Kind kind_;
  CaseConfig config_;
  ref::RowShape shape_;
  ref::HostArray host_a_, host_b_, host_weight_, host_bias_;
  std::vector<float> host_mean_, host_rstd_;
  DeviceArray a_, b_, weight_, bias_, mean_, rstd_, out_, dweight_, dbias_;
  DeviceBuffer workspace_;
};

OpDescriptor rowwise_descriptor(const char* name, const char* summary, Kind kind) {
  OpDescriptor op;
  op.name = name;
  op.summary = summary;
  op.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  op.dims = {{"rows", "number of rows", 4096},
             {"cols", "elements per row (the reduced axis)", 4096},
             {"pad", "row stride minus cols, for every matrix", 0}};
  for (int64_t cols : {1024, 4096, 32768}) {
    op.bench_shapes.push_back({{"rows", (int64_t{1} << 25) / cols}, {"cols", cols}, {"pad", 0}});
  }
  op.headline_shapes = {{{"rows", 32768}, {"cols", 4096}, {"pad", 0}},
                        {{"rows", 4096}, {"cols", 32768}, {"pad", 0}},
                        {{"rows", 65536}, {"cols", 1024}, {"pad", 0}}};
  op.make_case = [kind](const CaseConfig& config, std::unique_ptr<OpCase>* out) {
    auto c = std::make_unique<RowwiseCase>(kind, config);
    Status status = c->prepare();
    if (status.ok()) *out = std::move(c);
    return status;
  };
  return op;
}

[[maybe_unused]] const bool kRegistered =
    register_op(rowwise_descriptor("softmax", "y = softmax(x) along each row", Kind::kSoftmax)) &&
    register_op(rowwise_descriptor("softmax_backward", "dx = y * (dy - sum(dy * y)) per row",
                                   Kind::kSoftmaxBackward)) &&
    register_op(rowwise_descriptor("layer_norm",
                                   "y = (x - mean) * rstd * weight + bias, with mean and rstd",
                                   Kind::kLayerNorm)) &&
    register_op(rowwise_descriptor("layer_norm_backward", "dx, dweight, dbias of layer_norm",
                                   Kind::kLayerNormBackward)) &&
    register_op(
        rowwise_descriptor("rms_norm", "y = x * rstd * weight, with rstd", Kind::kRmsNorm)) &&
    register_op(rowwise_descriptor("rms_norm_backward", "dx, dweight of rms_norm",
                                   Kind::kRmsNormBackward)) &&
    register_op(rowwise_descriptor("fused_add_rms_norm",
                                   "residual += x; x = rms_norm(residual) * weight (in place)",
                                   Kind::kFusedAddRmsNorm));

}  // namespace
}  // namespace cudaops::harness
