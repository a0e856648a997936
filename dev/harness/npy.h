#pragma once

// NumPy .npy files (format versions 1.0, 2.0 and 3.0), read with every field checked: the CLI
// loads keys, values and queries from them. A file is refused (kFileError, naming the check)
// unless it is a regular file whose header parses exactly, in C order, of a little-endian
// float16 or float32 dtype, whose shape's element count does not overflow and whose data is
// exactly as long as that shape says.
#include <cstdint>
#include <string>
#include <vector>

#include "cudaops/dtype.h"
#include "cudaops/status.h"

namespace cudaops::harness {

struct NpyArray {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;  // C order, little-endian
};

/// Reads `path` into *out; *out is left empty on failure.
Status read_npy(const std::string& path, NpyArray* out);

/// Parses a header's dictionary (the text after the length field) into dtype and shape.
Status parse_npy_header(const std::string& header, DType* dtype, std::vector<int64_t>* shape);

/// Writes `array` as a version 1.0 file (for tests and for results the CLI saves).
Status write_npy(const std::string& path, const NpyArray& array);

}  // namespace cudaops::harness
