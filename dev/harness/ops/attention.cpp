// The descriptor of attention_merge: `parts` partial attentions of `rows` rows of `dim` values
// (random outputs, log-sum-exps spread over a few units, one part of every seventh row at -inf),
// merged into one.
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "cudaops/attention.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/attention.h"

namespace cudaops::harness {
namespace {

class MergeCase : public OpCase {
 public:
  explicit MergeCase(const CaseConfig& config) : config_(config) {}

  Status prepare() {
    parts_ = dim_value(config_.dims, "parts");
    rows_ = dim_value(config_.dims, "rows");
    dim_ = dim_value(config_.dims, "dim");
    int64_t total = 0;
    if (Status s = checked_elements("attention_merge", "parts * rows * dim", {parts_, rows_, dim_},
                                    &total);
        !s.ok()) {
      return s;
    }
    host_outs_ = ref::HostArray(config_.dtype, total);
    ref::fill_random(host_outs_, config_.seed * 31 + 7);
    std::mt19937_64 rng(config_.seed * 17 + 3);
    std::normal_distribution<double> normal(0.0, 2.0);
    host_lses_.resize(static_cast<size_t>(parts_ * rows_));
    for (int64_t i = 0; i < parts_ * rows_; ++i) {
      host_lses_[static_cast<size_t>(i)] = (i % rows_) % 7 == 3 && i / rows_ == 0
                                               ? -std::numeric_limits<double>::infinity()
                                               : static_cast<float>(normal(rng));
    }
    ref::HostArray lses(DType::kFloat32, parts_ * rows_);
    for (int64_t i = 0; i < parts_ * rows_; ++i)
      lses.set(i, host_lses_[static_cast<size_t>(i)]);
    Status s = outs_.allocate(config_.dtype, total, config_.offset);
    if (s.ok()) s = outs_.upload(host_outs_, nullptr);
    if (s.ok()) s = lses_.allocate(DType::kFloat32, parts_ * rows_, 0);
    if (s.ok()) s = lses_.upload(lses, nullptr);
    if (s.ok()) s = out_.allocate(config_.dtype, rows_ * dim_, config_.offset);
    if (s.ok()) s = lse_.allocate(DType::kFloat32, rows_, 0);
    return s;
  }

  int64_t bytes_moved() const override {
    return outs_.size_bytes() + lses_.size_bytes() + out_.size_bytes() + lse_.size_bytes();
  }

  Status run(cudaStream_t stream) override {
    return attention_merge(outs_.data(), static_cast<const float*>(lses_.data()), out_.data(),
                           static_cast<float*>(lse_.data()), parts_, rows_, dim_, config_.dtype,
                           stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    Status s = out_.poison(stream);
    if (s.ok()) s = lse_.poison(stream);
    if (s.ok()) s = run(stream);
    ref::HostArray got, got_lse;
    if (s.ok()) s = out_.download(&got, stream);
    if (s.ok()) s = lse_.download(&got_lse, stream);
    if (!s.ok()) return s;
    std::vector<double> want, want_lse;
    ref::attention_merge(host_outs_, host_lses_, parts_, rows_, dim_, &want, &want_lse);
    // The outputs and the log-sum-exps as one comparison: the dtype's rounding of a float32 sum.
    ref::HostArray all(DType::kFloat32, rows_ * dim_ + rows_);
    std::vector<double> expected(static_cast<size_t>(rows_ * dim_ + rows_));
    for (int64_t i = 0; i < rows_ * dim_; ++i) {
      all.set(i, got.get(i));
      expected[static_cast<size_t>(i)] = want[static_cast<size_t>(i)];
    }
    for (int64_t r = 0; r < rows_; ++r) {
      all.set(rows_ * dim_ + r, got_lse.get(r));
      expected[static_cast<size_t>(rows_ * dim_ + r)] = want_lse[static_cast<size_t>(r)];
    }
    const double rel = config_.dtype == DType::kBFloat16  ? 1e-2
                       : config_.dtype == DType::kFloat16 ? 2e-3
                                                          : 1e-5;
    // The parts are standard normal: an output that their weighted sum cancels to near zero is
    // judged against the parts' scale (floor 1), which its rounding follows.
    *result = ref::compare(all, expected, ref::Tolerance{rel, 1.0});
    return Status();
  }

 private:
  CaseConfig config_;
  int64_t parts_ = 0, rows_ = 0, dim_ = 0;
  ref::HostArray host_outs_;
  std::vector<double> host_lses_;
  DeviceArray outs_, lses_, out_, lse_;
};

OpDescriptor merge_descriptor() {
  OpDescriptor op;
  op.name = "attention_merge";
  op.summary = "partial attentions merged exactly by their log-sum-exps";
  op.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  op.dims = {{"parts", "partial attentions", 2},
             {"rows", "rows (query heads x queries)", 32},
             {"dim", "values per row", 128}};
  op.bench_shapes = {{{"parts", 2}, {"rows", 32}, {"dim", 128}},
                     {{"parts", 8}, {"rows", 32768}, {"dim", 128}}};
  op.headline_shapes = op.bench_shapes;
  op.make_case = [](const CaseConfig& config, std::unique_ptr<OpCase>* out) {
    auto c = std::make_unique<MergeCase>(config);
    Status status = c->prepare();
    if (status.ok()) *out = std::move(c);
    return status;
  };
  return op;
}

[[maybe_unused]] const bool kRegistered = register_op(merge_descriptor());

}  // namespace
}  // namespace cudaops::harness
