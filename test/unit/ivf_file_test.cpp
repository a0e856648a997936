// The IVF index's file (ivf/ivf_file.h): the round trip of an index's held part, and files whose
// checksums are right but whose contents the search must not trust (ranges past the tokens, sizes
// that disagree, repeated ids, a forged largest size or shape, a missing array) refused.
#include "ivf/ivf_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
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

}  // namespace
}  // namespace cudaops::detail::ivf
