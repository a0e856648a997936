#pragma once

// Op descriptors: what the CLI's `run`/`bench` and the benches need to know of an op to make its
// inputs from a shape, run it, count its bytes and check it against the CPU reference. Each op
// family registers its descriptors from its own file under ops/; nothing central lists them.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cudaops/dtype.h"
#include "cudaops/status.h"
#include "reference/compare.h"

namespace cudaops::harness {

/// Named sizes of a problem, in the op's order, e.g. {{"n", 1 << 24}} or {{"rows", 4096}, ...}.
using Dims = std::vector<std::pair<std::string, int64_t>>;

struct DimSpec {
  std::string name;       ///< also the CLI option, --<name>
  std::string help;       ///< one line
  int64_t default_value;  ///< used by `cudaops run` when the option is not given
  /// Words the option takes for its values ({"l2", 0}, {"cosine", 1}); empty: a number.
  std::vector<std::pair<std::string, int64_t>> words = {};
  /// A switch: the option takes no value and sets 1 (default 0).
  bool flag = false;
};

struct CaseConfig {
  DType dtype = DType::kFloat32;
  Dims dims;
  uint64_t seed = 1;
  /// Elements by which every device pointer is moved past a 256-byte aligned allocation.
  int64_t offset = 0;
};

/// One op on one problem: inputs made and uploaded, outputs allocated.
class OpCase {
 public:
  virtual ~OpCase() = default;
  /// Bytes that must cross device memory: every input read once, every output written once.
  virtual int64_t bytes_moved() const = 0;
  /// Floating-point operations of the matrix products, for ops bound by them (0 otherwise): the
  /// rate they are judged by is TFLOP/s against a cuBLAS GEMM of the same operations.
  virtual double flops() const { return 0.0; }
  /// Launches the op once on stream, asynchronously.
  virtual Status run(cudaStream_t stream) = 0;
  /// Poisons the outputs, runs the op, copies the results back and compares them with the
  /// double-precision reference (the worst output when there are several).
  virtual Status check(cudaStream_t stream, ref::CompareResult* result) = 0;
  /// Which kernel the op takes for this case and its launch, as the library plans it (for the
  /// ops that can say; empty otherwise). Needs the device.
  virtual std::string launch() const { return {}; }
};

struct OpDescriptor {
  std::string name;
  std::string summary;
  std::vector<DType> dtypes;
  std::vector<DimSpec> dims;
  std::vector<Dims> bench_shapes;     ///< the sweep of the Google Benchmark targets
  std::vector<Dims> headline_shapes;  ///< the standard sizes of `cudaops bench`
  std::function<Status(const CaseConfig&, std::unique_ptr<OpCase>*)> make_case;
  /// Checks a case's sizes as the op does, with no device (empty: nothing to check beyond the
  /// sizes being >= 0), so that a wrong size is a usage error before a GPU is looked for.
  std::function<Status(const CaseConfig&)> validate;
};

/// Adds a descriptor; returns true so that it can initialise a static. A second descriptor with
/// the same name is ignored (and false returned).
bool register_op(OpDescriptor descriptor);

/// Every registered op, sorted by name.
const std::vector<OpDescriptor>& registered_ops();

const OpDescriptor* find_op(std::string_view name);

/// The value of `name` in dims, or `fallback`.
int64_t dim_value(const Dims& dims, std::string_view name, int64_t fallback = 0);

/// The product of a case's sizes (`what`: "rows x cols", for the message), refused when it or
/// its bytes at 16 per element would not fit int64: a case's buffers are sized from it.
Status checked_elements(const std::string& op, const char* what,
                        std::initializer_list<int64_t> factors, int64_t* out);

/// "n=268435456" or "rows=4096 cols=1024".
std::string format_dims(const Dims& dims);

/// Dims with each of the descriptor's sizes at its default.
Dims default_dims(const OpDescriptor& descriptor);

}  // namespace cudaops::harness
