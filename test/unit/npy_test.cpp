// harness/npy: round trips, what numpy writes, and refusals of damaged or foreign files.
#include "harness/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace cudaops::harness {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/npy_" + std::to_string(::getpid()) + "_" + name;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// A version 1.0 file with `dict` as its header and `data_bytes` bytes of data.
std::string File(const std::string& dict, size_t data_bytes, char version = 1) {
  std::string header = dict;
  const size_t lead = version == 1 ? 10 : 12;
  header.append((64 - (lead + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + version + '\0';
  const size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (version != 1) out += std::string(2, '\0');
  return out + header + std::string(data_bytes, '\x3c');
}

TEST(Npy, RoundTrip) {
  NpyArray a;
  a.dtype = DType::kFloat16;
  a.shape = {2, 3, 8};
  for (int i = 0; i < 2 * 3 * 8 * 2; ++i)
    a.data.push_back(static_cast<unsigned char>(i * 7));
  const std::string path = TempPath("round.npy");
  ASSERT_TRUE(write_npy(path, a).ok());
  NpyArray b;
  const Status s = read_npy(path, &b);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(b.dtype, DType::kFloat16);
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.data, a.data);
  a.shape = {48};  // one dimension: "(48,)"
  ASSERT_TRUE(write_npy(path, a).ok());
  ASSERT_TRUE(read_npy(path, &b).ok());
  EXPECT_EQ(b.shape, std::vector<int64_t>{48});
  std::remove(path.c_str());
}

TEST(Npy, HeadersAsNumpyWritesThem) {
  DType dtype{};
  std::vector<int64_t> shape;
  ASSERT_TRUE(parse_npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1000, 64), }",
                               &dtype, &shape)
                  .ok());
  EXPECT_EQ(dtype, DType::kFloat32);
  EXPECT_EQ(shape, (std::vector<int64_t>{4, 1000, 64}));
  ASSERT_TRUE(
      parse_npy_header("{'shape': (), 'fortran_order': False, 'descr': '<f2'}", &dtype, &shape)
          .ok());
  EXPECT_TRUE(shape.empty());
  // Version 2.0 (a 4-byte header length).
  const std::string path = TempPath("v2.npy");
  WriteBytes(path, File("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", 6, 2));
  NpyArray a;
  const Status s = read_npy(path, &a);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::remove(path.c_str());
}

TEST(Npy, RefusesWhatItCannotTrust) {
  const std::string ok = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 4), }";
  struct Bad {
    std::string bytes;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"", "no magic"},
      {"\x93NUMPX\x01\x00", "no magic"},
      {File(ok, 15), "its shape needs 16"},
      {File(ok, 17), "its shape needs 16"},
      {File(ok, 16).substr(0, 12), "truncated header"},
      {File(ok, 16, 4), "format version 4"},
      {File("{'descr': '>f2', 'fortran_order': False, 'shape': (2, 4), }", 16), "'>f2'"},
      {File("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 4), }", 16), "'<i8'"},
      {File("{'descr': '<f2', 'fortran_order': True, 'shape': (2, 4), }", 16), "Fortran"},
      {File("{'descr': '<f2', 'fortran_order': False}", 16), "lacks"},
      {File("{'descr': '<f2', 'descr': '<f2', 'fortran_order': False, 'shape': (2, 4)}", 16),
       "repeated key"},
      {File("{'descr': '<f2', 'fortran_order': False, 'shape': (-2, 4), }", 16), "bad dimension"},
      {File("{'descr': '<f2', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 16),
       "overflows"},
      {File("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 4), } x", 16), "after"},
      {File("['descr', '<f2']", 16), "not a dictionary"},
  };
  const std::string path = TempPath("bad.npy");
  for (const Bad& b : bad) {
    WriteBytes(path, b.bytes);
    NpyArray a;
    a.shape = {1};
    const Status s = read_npy(path, &a);
    EXPECT_EQ(s.code(), StatusCode::kFileError) << b.says;
    EXPECT_NE(s.message().find(b.says), std::string::npos) << s.message();
    EXPECT_TRUE(a.shape.empty() && a.data.empty()) << b.says;
  }
  std::remove(path.c_str());
  NpyArray a;
  EXPECT_EQ(read_npy(TempPath("missing.npy"), &a).code(), StatusCode::kFileError);
  EXPECT_NE(read_npy(::testing::TempDir(), &a).message().find("not a regular file"),
            std::string::npos);
}

TEST(Npy, OpensOnceAndFollowsNoLink) {
  NpyArray a;
  a.dtype = DType::kFloat32;
  a.shape = {3};
  a.data.assign(12, 0x3f);
  const std::string file = TempPath("target.npy"), link = TempPath("link.npy");
  ASSERT_TRUE(write_npy(file, a).ok());
  std::remove(link.c_str());
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  NpyArray b;
  const Status s = read_npy(link, &b);
  EXPECT_EQ(s.code(), StatusCode::kFileError);
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.message();
  std::remove(link.c_str());

  // A FIFO swapped in for the file while it is read: every read returns (the file's arrays or a
  // refusal), none blocks on the FIFO.
  const std::string fifo = TempPath("fifo"), target = TempPath("swapped.npy");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread swapper([&] {
    const std::string tmp = target + ".tmp";
    for (int i = 0; !done.load(); ++i) {
      std::remove(tmp.c_str());
      if (::link(i % 2 == 0 ? file.c_str() : fifo.c_str(), tmp.c_str()) == 0) {
        (void)std::rename(tmp.c_str(), target.c_str());
      }
    }
    std::remove(tmp.c_str());
  });
  int read_ok = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    NpyArray c;
    const Status r = read_npy(target, &c);
    if (r.ok()) {
      ++read_ok;
      EXPECT_EQ(c.shape, a.shape);
    } else {
      ++refused;
      EXPECT_EQ(r.code(), StatusCode::kFileError) << r.message();
    }
  }
  done = true;
  swapper.join();
  EXPECT_EQ(read_ok + refused, 200);
  for (const std::string& p : {file, fifo, target})
    std::remove(p.c_str());
}

// A seeded mutator over valid files (bytes flipped, cut, inserted; header text changed): every
// read returns a status, and an accepted file's data is exactly what its shape says.
TEST(Npy, SeededMutations) {
  NpyArray a;
  a.dtype = DType::kFloat16;
  a.shape = {3, 5};
  a.data.assign(30, 0x11);
  const std::string path = TempPath("fuzz.npy");
  ASSERT_TRUE(write_npy(path, a).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937_64 rng(20261207);
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 5) {
        case 0:
          bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          bytes.resize(at);
          break;
        case 2:
          bytes.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
          break;
        case 3: {  // a header character replaced by one the parser cares about
          const char special[] = "{}()',: 0123456789-<>|fTFx\n";
          bytes[std::min<size_t>(at % 80, bytes.size() - 1)] =
              special[rng() % (sizeof(special) - 1)];
          break;
        }
        default:
          bytes.erase(at, 1 + rng() % 4);
          break;
      }
    }
    WriteBytes(path, bytes);
    NpyArray got;
    const Status s = read_npy(path, &got);
    if (s.ok()) {
      ++accepted;
      int64_t elements = 1;
      for (int64_t n : got.shape)
        elements *= n;
      EXPECT_EQ(static_cast<int64_t>(got.data.size()), elements * dtype_size(got.dtype));
    } else {
      EXPECT_EQ(s.code(), StatusCode::kFileError) << s.to_string();
      EXPECT_TRUE(got.shape.empty() && got.data.empty());
    }
  }
  EXPECT_GT(accepted, 0) << "some mutations (of the data) leave a valid file";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cudaops::harness
