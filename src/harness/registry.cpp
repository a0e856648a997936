#include "harness/registry.h"

#include <algorithm>

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
