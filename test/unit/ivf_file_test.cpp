// The IVF index's file (ivf/ivf_file.h): the round trip of an index's held part, and files whose
// checksums are right but whose contents the search must not trust (ranges past the tokens, sizes
// that disagree, repeated ids, a forged largest size or shape, a missing array) refused.
#include "ivf/ivf_file.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "io/array_file.h"
#include "status_assertions.h"

namespace cudaops::detail::ivf {
namespace {

using cudaops::testing::FailsWith;

class IvfFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cudaops-ivf-file-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/index.ivf";
  }
  void TearDown() override {
    const std::string command = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }

  /// A consistent index: 2 heads of 10 tokens in 3 clusters, D = 8, Dv = 16.
  static HostIndex Index() {
    IvfShape s;
    s.heads = 2;
    s.dim = 8;
    s.value_dim = 16;
    s.capacity = 10;
    s.max_clusters = 3;
    s.dtype = DType::kBFloat16;
    HostIndex x;
    EXPECT_TRUE(x.allocate(s, "test").ok());
    std::mt19937 rng(3);
    for (float& v : x.means)
      v = static_cast<float>(rng() % 100) * 0.01f;
    for (float& v : x.centroids)
      v = static_cast<float>(rng() % 100) * 0.01f;
    for (uint16_t& v : x.keys)
      v = static_cast<uint16_t>(rng());
    for (uint16_t& v : x.values)
      v = static_cast<uint16_t>(rng());
    const int64_t sizes[2][3] = {{4, 0, 6}, {3, 3, 4}};
    for (int h = 0; h < 2; ++h) {
      int64_t at = 0;
      for (int j = 0; j < 3; ++j) {
        x.offsets[h * 4 + j] = at;
        x.sizes[h * 3 + j] = static_cast<int32_t>(sizes[h][j]);
        at += sizes[h][j];
      }
      x.offsets[h * 4 + 3] = at;
      std::vector<int32_t> ids(10);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::copy(ids.begin(), ids.end(), x.ids.begin() + h * 10);
    }
    x.largest = 6;
    return x;
  }

  Status Load(HostIndex* out) const { return read_index_file(path_, "ivf_load", out); }

  std::string dir_, path_;
};

TEST_F(IvfFileTest, RoundTrip) {
  const HostIndex x = Index();
  ASSERT_TRUE(write_index_file(x, path_, "ivf_save").ok());
  IvfShape shape;
  ASSERT_TRUE(read_index_shape(path_, "ivf_load", &shape).ok());
  EXPECT_EQ(shape.heads, 2);
  EXPECT_EQ(shape.capacity, 10);
  EXPECT_EQ(shape.max_clusters, 3);
  EXPECT_EQ(shape.value_dim, 16);
  EXPECT_EQ(shape.dtype, DType::kBFloat16);
  HostIndex y;
  ASSERT_TRUE(Load(&y).ok());
  EXPECT_EQ(y.means, x.means);
  EXPECT_EQ(y.centroids, x.centroids);
  EXPECT_EQ(y.offsets, x.offsets);
  EXPECT_EQ(y.sizes, x.sizes);
  EXPECT_EQ(y.ids, x.ids);
  EXPECT_EQ(y.keys, x.keys);
  EXPECT_EQ(y.values, x.values);
  EXPECT_EQ(y.largest, 6);
}

TEST_F(IvfFileTest, UntrustworthyContentsRefused) {
  struct Damage {
    const char* what;
    void (*apply)(HostIndex*);
  };
  const Damage damages[] = {
      {"the cluster ranges do not cover", [](HostIndex* x) { x->offsets[3] = 11; }},
      {"its range and size disagree", [](HostIndex* x) { x->sizes[1] = 1; }},
      {"its range and size disagree",
       [](HostIndex* x) {
         x->offsets[1] = 7;  // out of order
         x->sizes[0] = 7;
       }},
      {"token ids are not each", [](HostIndex* x) { x->ids[3] = x->ids[4]; }},
      {"token ids are not each", [](HostIndex* x) { x->ids[12] = 10; }},
      {"token ids are not each", [](HostIndex* x) { x->ids[0] = -1; }},
      {"largest cluster", [](HostIndex* x) { x->largest = 100; }},
  };
  for (const Damage& d : damages) {
    HostIndex x = Index();
    d.apply(&x);
    ASSERT_TRUE(write_index_file(x, path_, "ivf_save").ok());
    HostIndex y;
    EXPECT_TRUE(FailsWith(Load(&y), StatusCode::kFileError, {"ivf_load", d.what})) << d.what;
  }
}

TEST_F(IvfFileTest, ShapeAndArraysMustAgree) {
  // A shape that asks for more than the arrays hold: refused before anything is allocated.
  const HostIndex x = Index();
  const int64_t forged[6] = {
      int64_t{1} << 20, 8, 16, 10, 3, static_cast<int64_t>(DType::kBFloat16)};
  std::vector<io::ArrayToWrite> arrays = {{"ivf.shape", DType::kInt64, {6}, forged},
                                          {"means", DType::kFloat32, {2, 8}, x.means.data()}};
  ASSERT_TRUE(io::write_array_file(path_, "ivf", arrays, "ivf_save").ok());
  HostIndex y;
  EXPECT_TRUE(FailsWith(Load(&y), StatusCode::kFileError, {"array means", "missing or not"}));
  // No shape at all, or a shape no index can have.
  arrays = {{"means", DType::kFloat32, {2, 8}, x.means.data()}};
  ASSERT_TRUE(io::write_array_file(path_, "ivf", arrays, "ivf_save").ok());
  EXPECT_TRUE(FailsWith(Load(&y), StatusCode::kFileError, {"ivf.shape"}));
  const int64_t odd[6] = {2, 12, 16, 10, 3, static_cast<int64_t>(DType::kBFloat16)};
  arrays = {{"ivf.shape", DType::kInt64, {6}, odd}};
  ASSERT_TRUE(io::write_array_file(path_, "ivf", arrays, "ivf_save").ok());
  EXPECT_TRUE(FailsWith(Load(&y), StatusCode::kFileError, {"not one an index can have"}));
  // A file of another kind.
  arrays = {{"ivf.shape", DType::kInt64, {6}, odd}};
  ASSERT_TRUE(io::write_array_file(path_, "kmeans", arrays, "ivf_save").ok());
  EXPECT_EQ(Load(&y).code(), StatusCode::kFileError);
}

// A seeded mutator of the contents the search trusts (offsets, sizes, ids, the largest size),
// written with valid checksums: each file is refused, or, where the mutation kept the index
// consistent, loaded with every invariant the search relies on.
TEST_F(IvfFileTest, SeededContentMutations) {
  const HostIndex valid = Index();
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int round = 0; round < 600; ++round) {
    HostIndex x = valid;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const int64_t big = static_cast<int64_t>(rng() % 64) - 16;
      switch (rng() % 4) {
        case 0:
          x.offsets[rng() % x.offsets.size()] = big;
          break;
        case 1:
          x.sizes[rng() % x.sizes.size()] = static_cast<int32_t>(big);
          break;
        case 2:
          x.ids[rng() % x.ids.size()] = static_cast<int32_t>(big);
          break;
        default:
          x.largest = static_cast<int32_t>(big);
          break;
      }
    }
    ASSERT_TRUE(write_index_file(x, path_, "ivf_save").ok());
    HostIndex y;
    const Status s = Load(&y);
    if (!s.ok()) {
      ++refused;
      EXPECT_EQ(s.code(), StatusCode::kFileError) << s.to_string();
      continue;
    }
    // Accepted: what the search trusts holds.
    const int64_t c = y.shape.max_clusters, n = y.shape.capacity;
    for (int64_t h = 0; h < y.shape.heads; ++h) {
      EXPECT_EQ(y.offsets[h * (c + 1)], 0);
      EXPECT_EQ(y.offsets[h * (c + 1) + c], n);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int64_t p = 0; p < n; ++p) {
        const int32_t t = y.ids[h * n + p];
        ASSERT_TRUE(t >= 0 && t < n);
        EXPECT_EQ(seen[t]++, 0);
      }
      for (int64_t j = 0; j < c; ++j)
        EXPECT_EQ(y.sizes[h * c + j], y.offsets[h * (c + 1) + j + 1] - y.offsets[h * (c + 1) + j]);
    }
  }
  EXPECT_GT(refused, 500);
}

TEST_F(IvfFileTest, EveryByteIsChecked) {
  // A byte of the padding after an array (not under the array's checksum) changed: refused.
  ASSERT_TRUE(write_index_file(Index(), path_, "ivf_save").ok());
  io::ArrayFile file;
  ASSERT_TRUE(io::ArrayFile::open(path_, "ivf", "test", &file).ok());
  uint64_t gap = 0, last = 0;
  for (const io::ArrayInfo& a : file.arrays())
    last = std::max(last, a.offset);
  for (const io::ArrayInfo& a : file.arrays()) {
    if (a.bytes % 256 != 0 && a.offset < last) gap = a.offset + a.bytes;
  }
  ASSERT_NE(gap, 0u);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(gap));
    f.put('\x5a');
  }
  HostIndex y;
  EXPECT_TRUE(FailsWith(Load(&y), StatusCode::kFileError, {"ivf_load", "non-zero bytes"}));
}

#if !defined(__SANITIZE_ADDRESS__)
TEST_F(IvfFileTest, ForgedRangesAreRefusedBeforeTheTokensAreAllocated) {
  // Checksums right, the clusters' ranges wrong, and 128 MiB of keys and values: the ranges are
  // refused before the tokens' memory is asked for. A child process under an address-space limit
  // 48 MiB above what it holds shows it: allocating them first fails there.
  IvfShape s;
  s.heads = 1;
  s.dim = 512;
  s.value_dim = 512;
  s.capacity = 65536;
  s.max_clusters = 2;
  s.dtype = DType::kFloat16;
  {
    HostIndex x;
    ASSERT_TRUE(x.allocate(s, "test").ok());
    x.offsets = {0, 100, 65536};
    x.sizes = {100, 65436};
    x.largest = 65436;
    x.offsets[1] = 200;  // the size of cluster 0 no longer matches its range
    ASSERT_TRUE(write_index_file(x, path_, "ivf_save").ok());
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) +
                         (rlim_t{48} << 20);
    const struct rlimit r = {limit, limit};
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &r) != 0) std::_Exit(3);
    HostIndex y;
    const Status st = read_index_file(path_, "ivf_load", &y);
    std::_Exit(st.code() == StatusCode::kFileError &&
                       st.message().find("range and size disagree") != std::string::npos
                   ? 0
                   : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif

}  // namespace
}  // namespace cudaops::detail::ivf
