// The protocols' element types and device types, and the small parsers of their fields.
#include <pybind11/stl.h>

#include <cctype>
#include <string>

#include "import_detail.h"

namespace cudaops::python::detail {

namespace {

const char* dl_device_name(int32_t type) {
  switch (type) {
    case dl::kCPU:
      return "the CPU";
    case dl::kCUDAHost:
      return "CUDA pinned host memory";
    case dl::kROCM:
    case dl::kROCMHost:
      return "a ROCm device";
    case dl::kOpenCL:
      return "an OpenCL device";
    case dl::kVulkan:
      return "a Vulkan device";
    case dl::kMetal:
      return "a Metal device";
    case dl::kOneAPI:
      return "a oneAPI device";
    default:
      return nullptr;
  }
}

}  // namespace

void require_cuda_device_type(int32_t type, const char* op, const std::string& name) {
  if (type == dl::kCUDA || type == dl::kCUDAManaged) return;
  const char* where = dl_device_name(type);
  std::string text = prefix(op, name) + "expected an array in CUDA device memory, got one on ";
  text += where != nullptr ? where : ("DLPack device type " + std::to_string(type));
  throw py::value_error(text);
}

namespace {

std::string dl_dtype_text(dl::DataType t) {
  std::string base;
  switch (t.code) {
    case dl::kInt:
      base = "int";
      break;
    case dl::kUInt:
      base = "uint";
      break;
    case dl::kFloat:
      base = "float";
      break;
    case dl::kBfloat:
      base = "bfloat";
      break;
    case dl::kComplex:
      base = "complex";
      break;
    case dl::kBool:
      return "bool";
    default:
      return "DLPack type code " + std::to_string(t.code) + " with " + std::to_string(t.bits) +
             " bits";
  }
  std::string text = base + std::to_string(t.bits);
  if (t.lanes != 1) text += "x" + std::to_string(t.lanes);
  return text;
}

constexpr const char* kExpectedDtypes = "expected float32, float16, bfloat16, int32 or int64";

DType dtype_from_dl(dl::DataType t, const char* op, const std::string& name) {
  if (t.lanes == 1) {
    if (t.code == dl::kFloat && t.bits == 32) return DType::kFloat32;
    if (t.code == dl::kFloat && t.bits == 16) return DType::kFloat16;
    if (t.code == dl::kBfloat && t.bits == 16) return DType::kBFloat16;
    if (t.code == dl::kInt && t.bits == 32) return DType::kInt32;
    if (t.code == dl::kInt && t.bits == 64) return DType::kInt64;
  }
  throw py::type_error(prefix(op, name) + "dtype " + dl_dtype_text(t) + " is not supported; " +
                       kExpectedDtypes);
}

}  // namespace

// Elements::kAny: any DLPack element type of a whole number of bytes, kept as its size.
void set_dl_type(ArrayView& view, dl::DataType t, Elements elements, const char* op) {
  view.type_text = dl_dtype_text(t);
  if (elements == Elements::kTyped) {
    view.dtype = dtype_from_dl(t, op, view.name);
    view.item_size = dtype_size(view.dtype);
    return;
  }
  const int64_t bits = static_cast<int64_t>(t.bits) * t.lanes;
  if (bits <= 0 || bits % 8 != 0) {
    throw py::type_error(prefix(op, view.name) + "dtype " + view.type_text +
                         " has no whole number of bytes per element");
  }
  view.item_size = bits / 8;
  view.typed = false;
}

namespace {

DType dtype_from_typestr(const std::string& typestr, const char* op, const std::string& name) {
  // Little-endian ('<') or native ('=', little-endian on every CUDA host); '|' (no byte order)
  // says nothing of a multi-byte type's, so it is not taken for one.
  if (typestr.size() >= 3 && (typestr[0] == '<' || typestr[0] == '=')) {
    const std::string body = typestr.substr(1);
    if (body == "f4") return DType::kFloat32;
    if (body == "f2") return DType::kFloat16;
    if (body == "i4") return DType::kInt32;
    if (body == "i8") return DType::kInt64;
  }
  throw py::type_error(prefix(op, name) + "typestr '" + typestr + "' is not supported; " +
                       "expected '<f4' (float32), '<f2' (float16), '<i4' (int32) or '<i8' "
                       "(int64); bfloat16 has no typestr and is taken through DLPack");
}

}  // namespace

// Elements::kAny: any typestr ("<f8", "|u1", "|b1", "<c16", "|V12") whose size is given.
void set_typestr(ArrayView& view, const std::string& typestr, Elements elements, const char* op) {
  view.type_text = typestr;
  if (elements == Elements::kTyped) {
    view.dtype = dtype_from_typestr(typestr, op, view.name);
    view.item_size = dtype_size(view.dtype);
    return;
  }
  int64_t size = 0;
  const bool shaped = typestr.size() >= 3 && typestr.size() <= 8 &&
                      (typestr[0] == '<' || typestr[0] == '=' || typestr[0] == '|') &&
                      std::isalpha(static_cast<unsigned char>(typestr[1])) != 0;
  if (shaped) {
    for (size_t i = 2; i < typestr.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(typestr[i])) == 0) {
        size = 0;
        break;
      }
      size = size * 10 + (typestr[i] - '0');
    }
  }
  // '|' only where byte order cannot matter: single bytes and opaque records ('|V12').
  if (size > 1 && typestr[0] == '|' && typestr[1] != 'V') size = 0;
  if (size <= 0) {
    throw py::type_error(prefix(op, view.name) + "typestr '" + typestr +
                         "' is not supported; expected a little-endian type with its size in "
                         "bytes, such as '<f8' or '|u1'");
  }
  view.item_size = size;
  view.typed = false;
}

int64_t as_int(py::handle value, const char* op, const std::string& name, const char* what) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw py::type_error(prefix(op, name) + what + " must be an int, got " + type_name(value));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(prefix(op, name) + what + " does not fit in int64");
  return static_cast<int64_t>(v);
}

std::vector<int64_t> int_tuple(py::handle value, const char* op, const std::string& name,
                               const char* what) {
  if (!PyTuple_Check(value.ptr()) && !PyList_Check(value.ptr())) {
    throw py::type_error(prefix(op, name) + what + " must be a tuple of ints, got " +
                         type_name(value));
  }
  std::vector<int64_t> result;
  for (py::handle item : value)
    result.push_back(as_int(item, op, name, what));
  return result;
}

}  // namespace cudaops::python::detail

namespace cudaops::python {

DType parse_dtype_arg(py::handle obj, const char* op) {
  std::string text;
  if (PyUnicode_Check(obj.ptr())) {
    text = obj.cast<std::string>();
  } else {
    text = py::str(obj).cast<std::string>();  // numpy.dtype('float32'), torch.float32, ...
    const std::string torch_prefix = "torch.";
    if (text.rfind(torch_prefix, 0) == 0) text = text.substr(torch_prefix.size());
  }
  DType dtype = DType::kFloat32;
  Status status = parse_dtype(text, &dtype);
  if (!status.ok()) throw py::type_error(std::string(op) + ": dtype: " + status.message());
  return dtype;
}

}  // namespace cudaops::python
