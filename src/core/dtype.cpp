#include "cudaops/dtype.h"

#include <cctype>
#include <string>

namespace cudaops {

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "invalid";
}

int64_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

bool dtype_is_floating(DType dtype) noexcept {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

Status parse_dtype(std::string_view name, DType* dtype) {
  if (dtype == nullptr) {
    return Status(StatusCode::kInvalidArgument, "parse_dtype: dtype must not be null");
  }
  std::string lower(name);
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct Alias {
    const char* text;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kFloat32}, {"fp32", DType::kFloat32},    {"f32", DType::kFloat32},
      {"float", DType::kFloat32},   {"float16", DType::kFloat16}, {"fp16", DType::kFloat16},
      {"f16", DType::kFloat16},     {"half", DType::kFloat16},    {"bfloat16", DType::kBFloat16},
      {"bf16", DType::kBFloat16},   {"int32", DType::kInt32},     {"i32", DType::kInt32},
      {"int", DType::kInt32},       {"int64", DType::kInt64},     {"i64", DType::kInt64},
      {"long", DType::kInt64},
  };
  for (const Alias& alias : kAliases) {
    if (lower == alias.text) {
      *dtype = alias.dtype;
      return Status();
    }
  }
  return Status(StatusCode::kUnsupportedDtype,
                "unknown dtype '" + std::string(name) +
                    "'; expected float32 (fp32), float16 (fp16, half), bfloat16 (bf16), int32 or "
                    "int64");
}

}  // namespace cudaops
