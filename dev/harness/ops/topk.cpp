// Descriptor of topk. Sizes: rows, cols, k, pad (x's row stride is cols + pad), and the options
// as 0/1 sizes: largest, sorted and index32 (int32 indices instead of int64).
#include <memory>
#include <utility>
#include <vector>

#include "cudaops/topk.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/topk.h"

namespace cudaops::harness {
namespace {

class TopkCase : public OpCase {
 public:
  explicit TopkCase(const CaseConfig& config) : config_(config) {}

  Status prepare() {
    const int64_t rows = dim_value(config_.dims, "rows");
    const int64_t cols = dim_value(config_.dims, "cols");
    const int64_t pad = dim_value(config_.dims, "pad");
    k_ = dim_value(config_.dims, "k");
    if (rows < 0 || cols < 0 || pad < 0 || pad > (int64_t{1} << 40)) {
      return Status(StatusCode::kInvalidArgument, "rows, cols and pad must be >= 0");
    }
    options_.largest = dim_value(config_.dims, "largest", 1) != 0;
    options_.sorted = dim_value(config_.dims, "sorted", 1) != 0;
    options_.index_dtype =
        dim_value(config_.dims, "index32", 0) != 0 ? DType::kInt32 : DType::kInt64;
    int64_t elements = 0;
    if (Status s = checked_elements("topk", "rows x (cols + pad)", {rows, cols + pad}, &elements);
        !s.ok())
      return s;
    if (Status s = checked_elements("topk", "rows x k", {rows, k_}, &elements); !s.ok()) return s;
    shape_ = {rows, cols, cols + pad};
    size_t bytes = 0;
    Status status = topk_workspace_size(rows, cols, k_, config_.dtype, &bytes);
    if (!status.ok()) return status;
    host_x_ = ref::HostArray(config_.dtype, rows * shape_.row_stride);
    ref::fill_random(host_x_, config_.seed * 7919);
    status = x_.allocate(config_.dtype, host_x_.size(), config_.offset);
    if (status.ok()) status = x_.upload(host_x_, nullptr);
    if (status.ok()) status = values_.allocate(config_.dtype, rows * k_, config_.offset);
    if (status.ok()) status = indices_.allocate(options_.index_dtype, rows * k_, config_.offset);
    if (status.ok() && bytes > 0) status = workspace_.allocate(static_cast<int64_t>(bytes));
    return status;
  }

  int64_t bytes_moved() const override {
    const int64_t s = dtype_size(config_.dtype);
    return shape_.rows * shape_.cols * s +
           shape_.rows * k_ * (s + dtype_size(options_.index_dtype));
  }

  Status run(cudaStream_t stream) override {
    return topk(ConstMatrixRef{x_.data(), shape_.row_stride}, MatrixRef{values_.data(), k_},
                MatrixRef{indices_.data(), k_}, shape_.rows, shape_.cols, k_, config_.dtype,
                options_, workspace_.get(), static_cast<size_t>(workspace_.size_bytes()), stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    Status status = values_.poison(stream);
    if (status.ok()) status = indices_.poison(stream);
    if (status.ok()) status = run(stream);
    ref::HostArray values, indices;
    if (status.ok()) status = values_.download(&values, stream);
    if (status.ok()) status = indices_.download(&indices, stream);
    if (!status.ok()) return status;
    const ref::TopkReference want =
        ref::topk(host_x_, shape_, k_, options_.largest, options_.sorted);
    // A selection is exact: the very values, and the very columns.
    *result = ref::compare(indices, std::vector<double>(want.indices.begin(), want.indices.end()),
                           ref::Tolerance{0.0, 1e-300});
    if (result->ok()) *result = ref::compare(values, want.values, ref::Tolerance{0.0, 1e-300});
    return Status();
  }

 private:
  CaseConfig config_;
  ref::RowShape shape_;
  int64_t k_ = 0;
  TopkOptions options_;
  ref::HostArray host_x_;
  DeviceArray x_, values_, indices_;
  DeviceBuffer workspace_;
};

OpDescriptor topk_descriptor() {
  OpDescriptor op;
  op.name = "topk";
  op.summary = "the k largest (or smallest) of each row, with their columns";
  op.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  op.dims = {{"rows", "number of rows", 64},
             {"cols", "elements per row", 65536},
             {"k", "elements selected per row (1 to min(cols, 4096))", 64},
             {"pad", "x's row stride minus cols", 0},
             {"largest", "1: the k largest; 0: the k smallest", 1},
             {"sorted", "1: in rank order; 0: in column order", 1},
             {"index32", "1: int32 indices; 0: int64", 0}};
  auto shape = [](int64_t rows, int64_t cols, int64_t k) {
    return Dims{{"rows", rows}, {"cols", cols}, {"k", k},      {"pad", 0},
                {"largest", 1}, {"sorted", 1},  {"index32", 0}};
  };
  op.bench_shapes = {shape(64, 65536, 64),    shape(64, 65536, 1024), shape(1024, 4096, 32),
                     shape(1, 1 << 24, 1024), shape(16384, 1024, 8),  shape(4096, 32768, 2048),
                     shape(64, 131072, 4096)};
  op.headline_shapes = {shape(64, 65536, 64), shape(64, 65536, 1024), shape(1024, 4096, 32),
                        shape(1, 1 << 24, 1024), shape(64, 131072, 4096)};
  op.validate = [](const CaseConfig& config) {
    size_t bytes = 0;
    return topk_workspace_size(dim_value(config.dims, "rows"), dim_value(config.dims, "cols"),
                               dim_value(config.dims, "k"), config.dtype, &bytes);
  };
  op.make_case = [](const CaseConfig& config, std::unique_ptr<OpCase>* out) {
    auto c = std::make_unique<TopkCase>(config);
    Status status = c->prepare();
    if (status.ok()) *out = std::move(c);
    return status;
  };
  return op;
}

[[maybe_unused]] const bool kRegistered = register_op(topk_descriptor());

}  // namespace
}  // namespace cudaops::harness
