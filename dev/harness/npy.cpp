#include "harness/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>

#include "io/trusted_file.h"

namespace cudaops::harness {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
constexpr uint32_t kMaxHeader = 1 << 20;  // numpy's own headers are a few hundred bytes

Status refuse(const std::string& path, const std::string& why) {
  return Status(StatusCode::kFileError, "reading " + path + ": " + why);
}

/// A cursor over the header's text, for its one fixed grammar.
struct Cursor {
  const std::string& text;
  size_t at = 0;

  void space() {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at])))
      ++at;
  }
  bool eat(char c) {
    space();
    if (at < text.size() && text[at] == c) {
      ++at;
      return true;
    }
    return false;
  }
  bool quoted(std::string* out) {
    space();
    if (at >= text.size() || (text[at] != '\'' && text[at] != '"')) return false;
    const char quote = text[at++];
    const size_t end = text.find(quote, at);
    if (end == std::string::npos) return false;
    *out = text.substr(at, end - at);
    at = end + 1;
    return true;
  }
  bool word(const char* w) {
    space();
    const size_t n = std::strlen(w);
    if (text.compare(at, n, w) != 0) return false;
    at += n;
    return true;
  }
  bool integer(int64_t* out) {
    space();
    const size_t start = at;
    int64_t v = 0;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) {
      const int64_t digit = text[at] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) return false;
      v = v * 10 + digit;
      ++at;
    }
    if (at == start) return false;
    if (at < text.size() && text[at] == 'L') ++at;  // written by Python 2
    *out = v;
    return true;
  }
};

}  // namespace

Status parse_npy_header(const std::string& header, DType* dtype, std::vector<int64_t>* shape) {
  const std::string what = "the .npy header";
  Cursor c{header};
  if (!c.eat('{')) return Status(StatusCode::kFileError, what + " is not a dictionary");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!c.eat('}')) {
    std::string key;
    if (!c.quoted(&key) || !c.eat(':')) {
      return Status(StatusCode::kFileError, what + " has a malformed key");
    }
    if (key == "descr" && !have_descr) {
      std::string descr;
      if (!c.quoted(&descr)) return Status(StatusCode::kFileError, what + ": descr is no string");
      if (descr == "<f2") {
        *dtype = DType::kFloat16;
      } else if (descr == "<f4") {
        *dtype = DType::kFloat32;
      } else {
        std::string text = what;
        text += ": dtype '";
        text += descr;
        text += "' is not supported; expected '<f2' (float16) or '<f4' (float32), little-endian";
        return Status(StatusCode::kFileError, text);
      }
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      if (c.word("True")) {
        return Status(StatusCode::kFileError, what + ": Fortran order is not supported");
      }
      if (!c.word("False")) {
        return Status(StatusCode::kFileError, what + ": fortran_order is not True or False");
      }
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      if (!c.eat('(')) return Status(StatusCode::kFileError, what + ": shape is no tuple");
      shape->clear();
      while (!c.eat(')')) {
        int64_t n = 0;
        if (!c.integer(&n)) return Status(StatusCode::kFileError, what + ": a bad dimension");
        shape->push_back(n);
        if (shape->size() > 32) return Status(StatusCode::kFileError, what + ": too many dims");
        if (!c.eat(',')) {
          if (!c.eat(')')) return Status(StatusCode::kFileError, what + ": a malformed shape");
          break;
        }
      }
      have_shape = true;
    } else {
      std::string text = what;
      text += ": unexpected or repeated key '";
      text += key;
      text += "'";
      return Status(StatusCode::kFileError, text);
    }
    if (!c.eat(',')) {
      if (!c.eat('}')) return Status(StatusCode::kFileError, what + ": a malformed dictionary");
      break;
    }
  }
  c.space();
  if (c.at != header.size()) {
    return Status(StatusCode::kFileError, what + " has text after its dictionary");
  }
  if (!have_descr || !have_order || !have_shape) {
    return Status(StatusCode::kFileError, what + " lacks descr, fortran_order or shape");
  }
  return Status();
}

Status read_npy(const std::string& path, NpyArray* out) {
  *out = NpyArray();
  // One open and the descriptor's own checks (no link, no FIFO, a regular file): what is checked
  // is what is read. A .npy may come from anyone (a saved cache), so its owner is not checked.
  detail::TrustedFile file;
  std::string why;
  if (!file.open(path, /*owned=*/false, &why)) return refuse(path, why);
  uint64_t at = 0;
  const auto read = [&](void* dst, size_t bytes) {
    if (!file.read_at(at, dst, bytes)) return false;
    at += bytes;
    return true;
  };
  unsigned char lead[kMagicBytes + 2] = {};
  if (!read(lead, sizeof(lead)) || std::memcmp(lead, kMagic, kMagicBytes) != 0) {
    return refuse(path, "not a .npy file (no magic bytes)");
  }
  const int major = lead[kMagicBytes];
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2] = {};
    if (!read(b, 2)) return refuse(path, "truncated header");
    header_len = static_cast<uint32_t>(b[0] | (b[1] << 8));
  } else if (major == 2 || major == 3) {
    unsigned char b[4] = {};
    if (!read(b, 4)) return refuse(path, "truncated header");
    header_len = static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                 (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    return refuse(path, "format version " + std::to_string(major) + " is not supported");
  }
  if (header_len > kMaxHeader) return refuse(path, "the header is implausibly long");
  std::string header(header_len, '\0');
  if (!read(header.data(), header_len)) return refuse(path, "truncated header");
  if (Status s = parse_npy_header(header, &out->dtype, &out->shape); !s.ok()) {
    *out = NpyArray();
    return refuse(path, s.message());
  }
  const auto prefix = static_cast<int64_t>(at);
  const int64_t item = dtype_size(out->dtype);
  int64_t elements = 1;
  for (int64_t n : out->shape) {
    if (n < 0 || (n > 0 && elements > std::numeric_limits<int64_t>::max() / item / n)) {
      *out = NpyArray();
      return refuse(path, "the shape's size overflows");
    }
    elements *= n;
  }
  const int64_t bytes = elements * item;
  const int64_t held = static_cast<int64_t>(file.size()) - prefix;
  if (held != bytes) {
    *out = NpyArray();
    return refuse(path, "holds " + std::to_string(held) + " bytes of data; its shape needs " +
                            std::to_string(bytes));
  }
  try {
    out->data.resize(static_cast<size_t>(bytes));
  } catch (const std::bad_alloc&) {
    *out = NpyArray();
    return refuse(path, "no host memory for its " + std::to_string(bytes) + " bytes");
  }
  if (bytes > 0 && !read(out->data.data(), static_cast<size_t>(bytes))) {
    *out = NpyArray();
    return refuse(path, "truncated data");
  }
  return Status();
}

Status write_npy(const std::string& path, const NpyArray& array) {
  if (array.dtype != DType::kFloat16 && array.dtype != DType::kFloat32) {
    return Status(StatusCode::kInvalidArgument, "write_npy: float16 or float32 only");
  }
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i)
    shape += (i > 0 ? ", " : "") + std::to_string(array.shape[i]);
  shape += array.shape.size() == 1 ? ",)" : ")";
  std::string header = std::string("{'descr': '") +
                       (array.dtype == DType::kFloat16 ? "<f2" : "<f4") +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = kMagicBytes + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return Status(StatusCode::kFileError, "writing " + path + ": cannot open");
  const unsigned char lead[] = {0x93,
                                'N',
                                'U',
                                'M',
                                'P',
                                'Y',
                                1,
                                0,
                                static_cast<unsigned char>(header.size() & 0xff),
                                static_cast<unsigned char>(header.size() >> 8)};
  file.write(reinterpret_cast<const char*>(lead), sizeof(lead));
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  file.write(reinterpret_cast<const char*>(array.data.data()),
             static_cast<std::streamsize>(array.data.size()));
  return file ? Status() : Status(StatusCode::kFileError, "writing " + path + ": write failed");
}

}  // namespace cudaops::harness
