// Descriptors of the elementwise ops: add and add_scalar.
#include <memory>
#include <utility>

#include "cudaops/elementwise.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/elementwise.h"

namespace cudaops::harness {
namespace {

// alpha of add_scalar in every generated case: not representable in float16 or bfloat16, so the
// float32 arithmetic followed by one rounding is exercised.
constexpr float kAlpha = 0.7071067811865476f;

class ElementwiseCase : public OpCase {
 public:
  ElementwiseCase(int arity, const CaseConfig& config) : arity_(arity), config_(config) {}

  Status prepare() {
    const int64_t n = dim_value(config_.dims, "n");
    if (n < 0) return Status(StatusCode::kInvalidArgument, "n must be >= 0");
    int64_t total = 0;
    if (Status s = checked_elements(arity_ == 2 ? "add" : "add_scalar", "n", {n}, &total); !s.ok())
      return s;
    for (int i = 0; i < arity_; ++i) {
      host_in_[i] = ref::HostArray(config_.dtype, n);
      ref::fill_random(host_in_[i], config_.seed * 7919 + static_cast<uint64_t>(i));
      Status status = in_[i].allocate(config_.dtype, n, config_.offset);
      if (status.ok()) status = in_[i].upload(host_in_[i], nullptr);
      if (!status.ok()) return status;
    }
    return out_.allocate(config_.dtype, n, config_.offset);
  }

  int64_t bytes_moved() const override { return (arity_ + 1) * out_.size_bytes(); }

  Status run(cudaStream_t stream) override {
    if (arity_ == 2) {
      return add(in_[0].data(), in_[1].data(), out_.data(), out_.size(), config_.dtype, stream);
    }
    return add_scalar(in_[0].data(), kAlpha, out_.data(), out_.size(), config_.dtype, stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    Status status = out_.poison(stream);
    if (status.ok()) status = run(stream);
    ref::HostArray got;
    if (status.ok()) status = out_.download(&got, stream);
    if (!status.ok()) return status;
    const std::vector<double> want =
        arity_ == 2 ? ref::add(host_in_[0], host_in_[1]) : ref::add_scalar(host_in_[0], kAlpha);
    *result = ref::compare(got, want, ref::rounding_tolerance(config_.dtype));
    return Status();
  }

 private:
  int arity_;
  CaseConfig config_;
  ref::HostArray host_in_[2];
  DeviceArray in_[2];
  DeviceArray out_;
};

std::vector<Dims> sweep() {
  std::vector<Dims> shapes;
  for (int log2 = 16; log2 <= 28; log2 += 2)
    shapes.push_back({{"n", int64_t{1} << log2}});
  return shapes;
}

OpDescriptor elementwise_descriptor(const char* name, const char* summary, int arity) {
  OpDescriptor op;
  op.name = name;
  op.summary = summary;
  op.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  op.dims = {{"n", "number of elements", int64_t{1} << 24}};
  op.bench_shapes = sweep();
  op.headline_shapes = {{{"n", int64_t{1} << 24}}, {{"n", int64_t{1} << 28}}};
  op.make_case = [arity](const CaseConfig& config, std::unique_ptr<OpCase>* out) {
    auto c = std::make_unique<ElementwiseCase>(arity, config);
    Status status = c->prepare();
    if (status.ok()) *out = std::move(c);
    return status;
  };
  return op;
}

[[maybe_unused]] const bool kRegistered =
    register_op(elementwise_descriptor("add", "out = a + b", 2)) &&
    register_op(elementwise_descriptor("add_scalar", "out = a + alpha (alpha = 0.70710678)", 1));

}  // namespace
}  // namespace cudaops::harness
