#include "harness/registry.h"

#include <algorithm>

#include "core/checked.h"

namespace cudaops::harness {
namespace {

std::vector<OpDescriptor>& registry() {
  static std::vector<OpDescriptor> ops;
  return ops;
}

}  // namespace

bool register_op(OpDescriptor descriptor) {
  auto& ops = registry();
  if (find_op(descriptor.name) != nullptr) return false;
  const auto at = std::lower_bound(
      ops.begin(), ops.end(), descriptor.name,
      [](const OpDescriptor& op, const std::string& name) { return op.name < name; });
  ops.insert(at, std::move(descriptor));
  return true;
}

const std::vector<OpDescriptor>& registered_ops() {
  return registry();
}

const OpDescriptor* find_op(std::string_view name) {
  for (const OpDescriptor& op : registry()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

int64_t dim_value(const Dims& dims, std::string_view name, int64_t fallback) {
  for (const auto& [key, value] : dims) {
    if (key == name) return value;
  }
  return fallback;
}

Status checked_elements(const std::string& op, const char* what,
                        std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t bytes = 0;
  if (detail::checked_product(factors, out) && detail::checked_mul(*out, 16, &bytes)) {
    return Status();
  }
  std::string sizes;
  for (int64_t factor : factors)
    sizes += (sizes.empty() ? "" : " x ") + std::to_string(factor);
  return Status(StatusCode::kInvalidArgument,
                op + ": " + what + " = " + sizes + " elements is more than 64-bit sizes hold");
}

std::string format_dims(const Dims& dims) {
  std::string text;
  for (const auto& [key, value] : dims) {
    if (!text.empty()) text += ' ';
    text += key + "=" + std::to_string(value);
  }
  return text;
}

Dims default_dims(const OpDescriptor& descriptor) {
  Dims dims;
  for (const DimSpec& spec : descriptor.dims)
    dims.emplace_back(spec.name, spec.default_value);
  return dims;
}

}  // namespace cudaops::harness
