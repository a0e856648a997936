// Files of named arrays (io/array_file.h): the round trip, and every way a file can be wrong —
// truncated, extended, corrupted anywhere, of another kind, byte order or version, a table that
// lies, a link, a FIFO, a directory, another user's or a group-writable file — refused with a
// status that says why, never a crash; and random damage, which is either refused or harmless.
#include "io/array_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace cudaops::detail::io {
namespace {

class ArrayFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cudaops-array-file-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/index.bin";
    floats_.resize(1000);
    for (size_t i = 0; i < floats_.size(); ++i)
      floats_[i] = static_cast<float>(i) * 0.25f - 7.0f;
    ids_ = {5, -1, 1 << 30, 42};
  }
  void TearDown() override {
    const std::string command = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }

  std::vector<ArrayToWrite> Arrays() const {
    return {{"keys", DType::kFloat32, {10, 100}, floats_.data()},
            {"ids", DType::kInt32, {4}, ids_.data()},
            {"empty", DType::kFloat16, {0, 3}, nullptr},
            {"scalar", DType::kInt64, {}, &scalar_}};
  }
  void Write() { ASSERT_TRUE(write_array_file(path_, "ivf", Arrays(), "save").ok()); }

  std::vector<unsigned char> Bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void Put(const std::vector<unsigned char>& bytes) const {
    ::unlink(path_.c_str());
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
  /// Opens the file and reads every array: the status of the first failure.
  Status OpenAndReadAll() const {
    ArrayFile file;
    if (Status s = ArrayFile::open(path_, "ivf", "load", &file); !s.ok()) return s;
    for (const ArrayInfo& info : file.arrays()) {
      std::vector<unsigned char> data(info.bytes);
      if (Status s = file.read(info, data.data()); !s.ok()) return s;
    }
    return Status();
  }
  static void Refused(const Status& s, const std::string& words) {
    EXPECT_EQ(s.code(), StatusCode::kFileError) << s.to_string();
    EXPECT_NE(s.message().find(words), std::string::npos)
        << "'" << s.message() << "' does not say '" << words << "'";
    EXPECT_EQ(s.message().rfind("load: ", 0), 0u) << s.message();
  }
  // Sets the little-endian u32 at `at` and fixes the header checksum.
  static void SetHeaderU32(std::vector<unsigned char>* b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i)
      (*b)[at + i] = static_cast<unsigned char>(v >> (8 * i));
    const uint32_t crc = crc32(b->data(), 60);
    for (int i = 0; i < 4; ++i)
      (*b)[60 + i] = static_cast<unsigned char>(crc >> (8 * i));
  }
  // Rewrites table entry `entry` at byte `at` (within it) and fixes both checksums.
  static void SetEntryU64(std::vector<unsigned char>* b, size_t entry, size_t at, uint64_t v) {
    const uint32_t count = (*b)[24] | ((*b)[25] << 8);
    for (int i = 0; i < 8; ++i)
      (*b)[64 + entry * 96 + at + i] = static_cast<unsigned char>(v >> (8 * i));
    SetHeaderU32(b, 28, crc32(b->data() + 64, size_t{count} * 96));
  }

  std::string dir_, path_;
  std::vector<float> floats_;
  std::vector<int32_t> ids_;
  int64_t scalar_ = -123456789012;
};

TEST(Crc32, KnownValues) {
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

TEST_F(ArrayFileTest, RoundTrip) {
  Write();
  ArrayFile file;
  const Status s = ArrayFile::open(path_, "ivf", "load", &file);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(file.arrays().size(), 4u);
  const ArrayInfo* keys = file.find("keys");
  ASSERT_NE(keys, nullptr);
  EXPECT_EQ(keys->dtype, DType::kFloat32);
  EXPECT_EQ(keys->shape, (std::vector<int64_t>{10, 100}));
  EXPECT_EQ(keys->offset % 256, 0u);
  std::vector<float> back(1000, -1.0f);
  ASSERT_TRUE(file.read(*keys, back.data()).ok());
  EXPECT_EQ(back, floats_);
  std::vector<int32_t> ids(4);
  ASSERT_TRUE(file.read(*file.find("ids"), ids.data()).ok());
  EXPECT_EQ(ids, ids_);
  EXPECT_EQ(file.find("empty")->bytes, 0u);
  int64_t scalar = 0;
  ASSERT_TRUE(file.read(*file.find("scalar"), &scalar).ok());
  EXPECT_EQ(scalar, scalar_);
  EXPECT_EQ(file.find("absent"), nullptr);
  // Written by this user alone, no temporary file left beside it.
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string listing = "ls -A '" + dir_ + "' | wc -l | grep -qx 1";
  EXPECT_EQ(std::system(listing.c_str()), 0);
  // A second save replaces the file whole.
  floats_[0] = 99.0f;
  Write();
  EXPECT_TRUE(OpenAndReadAll().ok());
}

TEST_F(ArrayFileTest, WriterRefusesBadArrays) {
  auto bad = [&](std::vector<ArrayToWrite> arrays) {
    const Status s = write_array_file(path_, "ivf", arrays, "save");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_EQ(::access(path_.c_str(), F_OK), -1) << "nothing may be written";
  };
  bad({{"", DType::kFloat32, {1}, floats_.data()}});
  bad({{"a name with spaces", DType::kFloat32, {1}, floats_.data()}});
  bad({{std::string(32, 'x'), DType::kFloat32, {1}, floats_.data()}});
  bad({{"a", DType::kFloat32, {1}, floats_.data()}, {"a", DType::kFloat32, {1}, floats_.data()}});
  bad({{"a", DType::kFloat32, {-1}, floats_.data()}});
  bad({{"a", DType::kFloat32, {1, 1, 1, 1, 1}, floats_.data()}});
  bad({{"a", DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, floats_.data()}});
  bad({{"a", static_cast<DType>(77), {1}, floats_.data()}});
  bad({{"a", DType::kFloat32, {3}, nullptr}});
  EXPECT_EQ(write_array_file(path_, "much-too-long", {}, "save").code(),
            StatusCode::kInvalidArgument);
  const Status s = write_array_file(dir_ + "/no/such/dir/x", "ivf", Arrays(), "save");
  EXPECT_EQ(s.code(), StatusCode::kFileError) << s.to_string();
}

TEST_F(ArrayFileTest, TruncatedOrExtended) {
  Write();
  const std::vector<unsigned char> whole = Bytes();
  for (size_t keep : {size_t{0}, size_t{10}, size_t{63}, size_t{64}, size_t{100}, size_t{500},
                      whole.size() / 2, whole.size() - 1}) {
    Put(std::vector<unsigned char>(whole.begin(), whole.begin() + static_cast<long>(keep)));
    Refused(OpenAndReadAll(), "truncated");
  }
  std::vector<unsigned char> longer = whole;
  longer.push_back(0);
  Put(longer);
  Refused(OpenAndReadAll(), "expected");
}

TEST_F(ArrayFileTest, HeaderChecks) {
  Write();
  const std::vector<unsigned char> whole = Bytes();
  std::vector<unsigned char> b = whole;
  b[1] = 'X';
  Put(b);
  Refused(OpenAndReadAll(), "magic");
  b = whole;
  b[8] = 'k';  // another kind
  Put(b);
  Refused(OpenAndReadAll(), "holds 'kvf', not 'ivf'");
  b = whole;
  SetHeaderU32(&b, 16, 0x0D0C0B0Au);
  Put(b);
  Refused(OpenAndReadAll(), "other byte order");
  b = whole;
  b[44] ^= 0x10;  // the file size, checksum left stale
  Put(b);
  Refused(OpenAndReadAll(), "corrupted header");
  b = whole;
  SetHeaderU32(&b, 20, 2u);  // major 2
  Put(b);
  Refused(OpenAndReadAll(), "format version 2.0");
  b = whole;
  SetHeaderU32(&b, 20, 1u | (1u << 16));  // 1.1: newer than this library's 1.0
  Put(b);
  Refused(OpenAndReadAll(), "format version 1.1");
  b = whole;
  SetHeaderU32(&b, 24, 5000u);  // more arrays than the table holds
  Put(b);
  Refused(OpenAndReadAll(), "table that does not fit");
}

TEST_F(ArrayFileTest, TableChecks) {
  Write();
  const std::vector<unsigned char> whole = Bytes();
  std::vector<unsigned char> b = whole;
  b[64 + 3] ^= 1;  // a name byte, table checksum left stale
  Put(b);
  Refused(OpenAndReadAll(), "corrupted table");
  b = whole;
  SetEntryU64(&b, 0, 72, whole.size() + 256);  // keys' offset past the end
  Put(b);
  Refused(OpenAndReadAll(), "lies outside the file");
  b = whole;
  SetEntryU64(&b, 0, 72, 64 + 4 * 96 + 1);  // unaligned
  Put(b);
  Refused(OpenAndReadAll(), "lies outside the file");
  b = whole;
  SetEntryU64(&b, 1, 72, 512);  // ids over keys
  Put(b);
  Refused(OpenAndReadAll(), "overlaps");
  b = whole;
  SetEntryU64(&b, 0, 80, 8);  // bytes that disagree with the shape
  Put(b);
  Refused(OpenAndReadAll(), "shape and size disagree");
  b = whole;
  SetEntryU64(&b, 0, 40, ~uint64_t{0} >> 1);  // a huge shape
  Put(b);
  Refused(OpenAndReadAll(), "shape and size disagree");
  b = whole;
  SetEntryU64(&b, 0, 32, 99 | (uint64_t{2} << 32));  // dtype 99
  Put(b);
  Refused(OpenAndReadAll(), "unknown dtype");
  b = whole;
  SetEntryU64(&b, 1, 0, 0x7379656b);  // ids renamed "keys"
  Put(b);
  Refused(OpenAndReadAll(), "twice");
  b = whole;
  SetEntryU64(&b, 0, 0, 0x2079656b);  // "key "
  Put(b);
  Refused(OpenAndReadAll(), "invalid name");
}

TEST_F(ArrayFileTest, DataChecksumOnRead) {
  Write();
  std::vector<unsigned char> b = Bytes();
  ArrayFile file;
  ASSERT_TRUE(ArrayFile::open(path_, "ivf", "load", &file).ok());
  const uint64_t at = file.find("keys")->offset + 17;
  b[at] ^= 0x40;
  Put(b);
  ASSERT_TRUE(ArrayFile::open(path_, "ivf", "load", &file).ok());  // the table is intact
  std::vector<float> back(1000);
  Refused(file.read(*file.find("keys"), back.data()), "array 'keys' is corrupted");
  std::vector<int32_t> ids(4);
  EXPECT_TRUE(file.read(*file.find("ids"), ids.data()).ok());
}

TEST_F(ArrayFileTest, OnlyThisUsersRegularFiles) {
  Write();
  const std::string link = dir_ + "/link.bin";
  ASSERT_EQ(::symlink(path_.c_str(), link.c_str()), 0);
  ArrayFile file;
  Refused(ArrayFile::open(link, "ivf", "load", &file), "symbolic link");
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Refused(ArrayFile::open(fifo, "ivf", "load", &file), "not a regular file");
  Refused(ArrayFile::open(dir_, "ivf", "load", &file), "not a regular file");
  Refused(ArrayFile::open(dir_ + "/absent", "ivf", "load", &file), "cannot open");
  ASSERT_EQ(::chmod(path_.c_str(), 0620), 0);
  Refused(ArrayFile::open(path_, "ivf", "load", &file), "writable by its group or others");
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  if (::geteuid() == 0) {  // as root, make it another user's
    ASSERT_EQ(::chown(path_.c_str(), 65534, 65534), 0);
    Refused(ArrayFile::open(path_, "ivf", "load", &file), "owned by user 65534");
  }
}

// Random damage (bytes flipped, cut, garbage appended, fields overwritten): either refused with a
// file error or, where it touched only padding, every array still reads back exactly.
TEST_F(ArrayFileTest, RandomDamageIsRefusedOrHarmless) {
  Write();
  const std::vector<unsigned char> whole = Bytes();
  std::mt19937_64 rng(2026);
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<unsigned char> b = whole;
    switch (rng() % 4) {
      case 0:
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
          b[rng() % b.size()] ^= static_cast<unsigned char>(1 + rng() % 255);
        break;
      case 1:
        b.resize(rng() % b.size());
        break;
      case 2:
        for (int k = 0, n = 1 + static_cast<int>(rng() % 64); k < n; ++k)
          b.push_back(static_cast<unsigned char>(rng()));
        break;
      default: {
        const size_t at = rng() % (b.size() - 8);
        const uint64_t v = rng();
        std::memcpy(b.data() + at, &v, 8);
      }
    }
    Put(b);
    const Status s = OpenAndReadAll();
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kFileError) << s.to_string();
      ++refused;
      continue;
    }
    ArrayFile file;
    ASSERT_TRUE(ArrayFile::open(path_, "ivf", "load", &file).ok());
    std::vector<float> back(1000);
    ASSERT_TRUE(file.read(*file.find("keys"), back.data()).ok());
    EXPECT_EQ(back, floats_) << "trial " << trial;
  }
  EXPECT_GT(refused, 1500);
}

}  // namespace
}  // namespace cudaops::detail::io
