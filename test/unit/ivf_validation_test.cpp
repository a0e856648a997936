// The IVF index's layout and argument validation (no GPU: CUDA_VISIBLE_DEVICES=-1, so a check
// that reached the device would report a CUDA error instead of the status expected here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "cudaops/ivf.h"
#include "status_assertions.h"

namespace cudaops {
namespace {

using testing::FailsWith;
using testing::fake;

IvfShape Shape() {
  IvfShape s;
  s.heads = 4;
  s.dim = 128;
  s.value_dim = 64;
  s.capacity = 5000;
  s.max_clusters = 96;
  return s;
}

TEST(IvfLayout, ArraysAlignedApartAndSized) {
  const IvfShape s = Shape();
  IvfLayout l;
  ASSERT_TRUE(ivf_index_size(s, &l).ok());
  const int64_t h = s.heads, c = s.max_clusters, d = s.dim, v = s.value_dim, n = s.capacity;
  const std::vector<std::pair<size_t, int64_t>> arrays = {{l.means, h * d * 4},
                                                          {l.centroids, h * c * d * 4},
                                                          {l.centroids_lp, h * c * d * 2},
                                                          {l.offsets, h * (c + 1) * 8},
                                                          {l.sizes, h * c * 4},
                                                          {l.ids, h * n * 4},
                                                          {l.keys, h * n * d * 2},
                                                          {l.values, h * n * v * 2},
                                                          {l.value_sums, h * c * v * 4},
                                                          {l.key_means, h * c * d * 2},
                                                          {l.largest, 4}};
  std::vector<std::pair<size_t, size_t>> spans;
  for (const auto& [offset, bytes] : arrays) {
    EXPECT_EQ(offset % 256, 0u);
    EXPECT_LE(offset + static_cast<size_t>(bytes), l.bytes);
    spans.emplace_back(offset, offset + static_cast<size_t>(bytes));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    EXPECT_LE(spans[i - 1].second, spans[i].first);
  // Without values: no bytes for them.
  IvfShape keys_only = s;
  keys_only.value_dim = 0;
  IvfLayout k;
  ASSERT_TRUE(ivf_index_size(keys_only, &k).ok());
  EXPECT_LT(k.bytes + static_cast<size_t>(h * n * v * 2), l.bytes + 1024);
}

TEST(IvfLayout, RefusesBadShapes) {
  IvfLayout l;
  IvfShape s = Shape();
  s.dtype = DType::kFloat32;
  EXPECT_TRUE(FailsWith(ivf_index_size(s, &l), StatusCode::kUnsupportedDtype,
                        {"ivf_index_size", "shape.dtype", "float32"}));
  s = Shape();
  s.dim = 100;
  EXPECT_TRUE(FailsWith(ivf_index_size(s, &l), StatusCode::kInvalidArgument,
                        {"shape.dim", "multiple of 8", "100"}));
  s = Shape();
  s.heads = 0;
  EXPECT_TRUE(
      FailsWith(ivf_index_size(s, &l), StatusCode::kInvalidArgument, {"shape.heads", ">= 1"}));
  s = Shape();
  s.max_clusters = 40000;
  EXPECT_TRUE(
      FailsWith(ivf_index_size(s, &l), StatusCode::kInvalidArgument, {"shape.max_clusters"}));
  s = Shape();
  s.capacity = int64_t{1} << 31;
  EXPECT_TRUE(FailsWith(ivf_index_size(s, &l), StatusCode::kInvalidArgument, {"shape.capacity"}));
  s = Shape();
  s.heads = int64_t{1} << 40;
  s.capacity = int64_t{1} << 30;
  EXPECT_TRUE(FailsWith(ivf_index_size(s, &l), StatusCode::kInvalidArgument, {"overflows"}));
  EXPECT_TRUE(
      FailsWith(ivf_index_size(Shape(), nullptr), StatusCode::kInvalidArgument, {"layout"}));
}

struct Build {
  IvfIndex index;
  IvfInput input;
  IvfBuildParams params;
  size_t bytes = 0;
  Build() {
    index.shape = Shape();
    index.data = fake(0x10000000);
    input.keys = fake(0x40000000);
    input.values = fake(0x50000000);
    input.seq = 4096;
    params.n_clusters = 64;
    params.n_segments = 4;
  }
  Status run() {
    size_t need = 0;
    if (Status s = ivf_build_workspace_size(index.shape, input, params, &need); !s.ok()) return s;
    return ivf_build(input, params, &index, fake(0x60000000), bytes > 0 ? bytes : need, nullptr);
  }
};

TEST(IvfBuildValidation, Parameters) {
  Build b;
  b.params.n_clusters = 66;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument,
                        {"ivf_build_workspace_size", "n_clusters (66)", "n_segments (4)"}));
  b = Build();
  b.params.n_clusters = 128;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"shape.max_clusters (96)"}));
  b = Build();
  b.params.n_segments = 0;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"params.n_segments"}));
  b = Build();
  b.input.seq = 5001;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"input.seq", "5000"}));
  b = Build();
  b.input.seq = 60;  // 15 tokens per segment, 16 clusters each
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"shortest segment", "(15)"}));
  b = Build();
  b.params.n_iters = -2;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"params.n_iters"}));
}

TEST(IvfBuildValidation, Memory) {
  Build b;
  b.input.values = nullptr;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"ivf_build", "input.values"}));
  b = Build();
  b.index.shape.value_dim = 0;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"input.values must be null"}));
  b = Build();
  b.input.keys = fake(0x40000008);
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kMisaligned, {"input.keys", "16-byte"}));
  b = Build();
  b.index.data = fake(0x10000040);
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kMisaligned, {"index->data", "256-byte"}));
  b = Build();
  b.bytes = 256;
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kWorkspaceTooSmall, {"ivf_build", "workspace_bytes"}));
  b = Build();
  b.input.keys = fake(0x10000000 + 4096);  // inside the index
  EXPECT_TRUE(FailsWith(b.run(), StatusCode::kInvalidArgument, {"input.keys", "index->data"}));
  b = Build();
  EXPECT_TRUE(FailsWith(ivf_build(b.input, b.params, nullptr, fake(0x60000000), 1 << 30, nullptr),
                        StatusCode::kInvalidArgument, {"index must not be null"}));
}

TEST(IvfBuildValidation, WorkspaceQueryNeedsNoDevice) {
  Build b;
  size_t bytes = 0;
  ASSERT_TRUE(ivf_build_workspace_size(b.index.shape, b.input, b.params, &bytes).ok());
  EXPECT_GT(bytes, static_cast<size_t>(4 * 4096 * 4 * 2));  // labels and the sorted order at least
  b.params.global_pass = false;
  size_t without = 0;
  ASSERT_TRUE(ivf_build_workspace_size(b.index.shape, b.input, b.params, &without).ok());
  EXPECT_EQ(without, bytes);
}

TEST(IvfBuildValidation, PrunedPassWorkspace) {
  // From 4096 clusters (dim <= 256) the pruned pass adds its groups and chunks to the workspace;
  // below, or with prune off, or without the global pass, the query is the dense pass's.
  Build b;
  b.index.shape.capacity = 16384;
  b.index.shape.max_clusters = 4096;
  b.input.seq = 16384;
  b.params.n_segments = 2;
  auto bytes = [&b](int64_t clusters, bool prune, bool global) {
    b.params.n_clusters = clusters;
    b.params.prune = prune;
    b.params.global_pass = global;
    size_t need = 0;
    EXPECT_TRUE(ivf_build_workspace_size(b.index.shape, b.input, b.params, &need).ok());
    return need;
  };
  const size_t dense = bytes(4096, false, true);
  // The chunks' operand alone: 4 heads x (4096 + 63 x 32 + 63) / 64 = 95 chunks x 64 x 128 values.
  EXPECT_GE(bytes(4096, true, true), dense + size_t{4} * 95 * 64 * 128 * 2);
  EXPECT_EQ(bytes(4096, true, false), bytes(4096, false, false));
  EXPECT_EQ(bytes(2048, true, true), bytes(2048, false, true));
  b.index.shape.dim = 264;
  EXPECT_EQ(bytes(4096, true, true), bytes(4096, false, true));
}

/// A built index (fake pointers) and queries against it, as the search and retrieval tests start.
IvfIndex BuiltIndex() {
  IvfIndex index;
  index.shape = Shape();
  index.data = fake(0x10000000);
  index.tokens = 4096;
  index.n_clusters = 64;
  return index;
}

IvfQueries SomeQueries() {
  IvfQueries queries;
  queries.data = fake(0x40000000);
  queries.q_heads = 16;
  queries.n_queries = 2;
  return queries;
}

struct Search {
  IvfIndex index = BuiltIndex();
  IvfQueries queries = SomeQueries();
  IvfSearchParams params;
  Search() {
    params.k = 100;
    params.n_probe = 8;
  }
  Status run(float* scores = static_cast<float*>(fake(0x50000000)),
             int64_t* ids = static_cast<int64_t*>(fake(0x58000000))) {
    size_t need = 0;
    if (Status s = ivf_search_workspace_size(index, queries, params, &need); !s.ok()) return s;
    return ivf_search(index, queries, params, scores, ids, fake(0x60000000), need, nullptr);
  }
};

TEST(IvfSearchValidation, Parameters) {
  Search s;
  s.queries.q_heads = 6;  // not a multiple of 4 heads
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kInvalidArgument,
                        {"ivf_search_workspace_size", "queries.q_heads (6)", "heads (4)"}));
  s = Search();
  s.params.n_probe = 65;
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kInvalidArgument, {"params.n_probe", "(64)"}));
  s = Search();
  s.params.k = 0;
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kInvalidArgument, {"params.k"}));
  s = Search();
  s.params.k = kIvfMaxK + 1;
  s.params.max_candidates = 10000;
  EXPECT_TRUE(
      FailsWith(s.run(), StatusCode::kInvalidArgument, {"params.k", "(10000), 4096", "4097"}));
  s = Search();
  s.params.max_candidates = 50;  // below k
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kInvalidArgument, {"params.k", "(50)"}));
  s = Search();
  s.index.n_clusters = 0;
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kInvalidArgument, {"a built index"}));
  s = Search();
  s.queries.n_queries = -1;
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kInvalidArgument, {"queries.n_queries"}));
}

TEST(IvfSearchValidation, Memory) {
  Search s;
  s.queries.data = fake(0x40000004);
  EXPECT_TRUE(FailsWith(s.run(), StatusCode::kMisaligned, {"ivf_search", "queries.data"}));
  s = Search();
  EXPECT_TRUE(FailsWith(s.run(nullptr), StatusCode::kInvalidArgument, {"d_scores"}));
  s = Search();
  EXPECT_TRUE(FailsWith(
      s.run(static_cast<float*>(fake(0x50000000)), static_cast<int64_t*>(fake(0x58000004))),
      StatusCode::kMisaligned, {"d_ids"}));
  s = Search();
  EXPECT_TRUE(FailsWith(s.run(static_cast<float*>(fake(0x10000000 + 256))),
                        StatusCode::kInvalidArgument, {"index.data", "d_scores"}));
  // No queries: nothing to do, nothing touched.
  s = Search();
  s.queries.n_queries = 0;
  EXPECT_TRUE(s.run(nullptr, nullptr).ok());
}

struct Retrieve {
  IvfIndex index = BuiltIndex();
  IvfQueries queries = SomeQueries();
  IvfRetrieveParams params;
  IvfRetrieved out;
  Retrieve() {
    params.probe.n_probe = 8;
    params.max_tokens = 300;
    out.keys = fake(0x50000000);
    out.values = fake(0x54000000);
    out.ids = static_cast<int64_t*>(fake(0x58000000));
    out.lengths = static_cast<int64_t*>(fake(0x5c000000));
  }
  Status run() {
    size_t need = 0;
    if (Status s = ivf_retrieve_workspace_size(index, queries, params, &need); !s.ok()) return s;
    return ivf_retrieve(index, queries, params, out, fake(0x60000000), need, nullptr);
  }
};

TEST(IvfRetrieveValidation, ArgumentsAndMemory) {
  Retrieve r;
  r.params.probe.n_probe = 65;
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument,
                        {"ivf_retrieve_workspace_size", "params.probe.n_probe", "(64)"}));
  r = Retrieve();
  r.params.max_tokens = 0;
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument, {"params.max_tokens"}));
  r = Retrieve();
  r.queries.q_heads = 6;
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument, {"queries.q_heads (6)"}));
  r = Retrieve();
  r.out.keys = nullptr;
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument, {"out.keys"}));
  r = Retrieve();
  r.out.keys = fake(0x50000008);
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kMisaligned, {"out.keys"}));
  r = Retrieve();
  r.out.lengths = static_cast<int64_t*>(fake(0x50000000));  // inside the keys' blocks
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument, {"out.keys", "out.lengths"}));
  r = Retrieve();
  r.index.shape.value_dim = 0;
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument, {"out.values", "no values"}));
  r = Retrieve();
  r.params.max_tokens = int64_t{1} << 62;
  EXPECT_TRUE(FailsWith(r.run(), StatusCode::kInvalidArgument, {"overflow"}));
  // The size query refuses what the call refuses: blocks of 2^60 rows are sized by neither.
  r = Retrieve();
  r.params.max_tokens = int64_t{1} << 60;
  size_t need = 0;
  EXPECT_TRUE(FailsWith(ivf_retrieve_workspace_size(r.index, r.queries, r.params, &need),
                        StatusCode::kInvalidArgument,
                        {"ivf_retrieve_workspace_size", "params.max_tokens", "overflows"}));
  r = Retrieve();
  r.queries.n_queries = 0;  // nothing to do, nothing touched
  r.out = IvfRetrieved();
  EXPECT_TRUE(r.run().ok());
}

struct Attend {
  IvfIndex index = BuiltIndex();
  IvfQueries queries = SomeQueries();
  IvfAttentionParams params;
  IvfExtra extra;
  void* out = fake(0x50000000);
  float* lse = static_cast<float*>(fake(0x54000000));
  Attend() {
    params.n_probe = 8;
    params.n_estimate = 16;
  }
  Status run() {
    size_t need = 0;
    if (Status s = ivf_attention_workspace_size(index, queries, params, extra, &need); !s.ok()) {
      return s;
    }
    return ivf_attention(index, queries, params, extra, out, lse, fake(0x60000000), need, nullptr);
  }
};

TEST(IvfAttentionValidation, ArgumentsAndMemory) {
  Attend a;
  a.params.n_probe = 0;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument,
                        {"ivf_attention_workspace_size", "params.n_probe", "(64)"}));
  a = Attend();
  a.params.n_estimate = 57;  // 8 + 57 > 64 clusters
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"params.n_estimate", "(56)"}));
  a = Attend();
  a.params.n_estimate = -1;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"params.n_estimate"}));
  a = Attend();
  a.params.scale = -0.5f;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"params.scale"}));
  a = Attend();
  a.params.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"params.scale"}));
  a = Attend();
  a.queries.q_heads = 6;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"queries.q_heads (6)"}));
  a = Attend();
  a.index.shape.value_dim = 0;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"holds no values"}));
  a = Attend();
  a.out = nullptr;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"ivf_attention", "d_out"}));
  a = Attend();
  a.out = fake(0x50000002);
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kMisaligned, {"d_out"}));
  a = Attend();
  a.lse = static_cast<float*>(fake(0x50000000));  // inside the output
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"d_out", "d_lse", "overlap"}));
  a = Attend();
  a.extra.tokens = 3;  // and no pointers
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"extra.keys"}));
  a = Attend();
  a.extra.tokens = -1;
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kInvalidArgument, {"extra.tokens"}));
  a = Attend();
  a.extra.tokens = 2;
  a.extra.keys = fake(0x70000000);
  a.extra.values = fake(0x70000008);
  EXPECT_TRUE(FailsWith(a.run(), StatusCode::kMisaligned, {"extra.values"}));
  a = Attend();
  a.lse = nullptr;  // the log-sum-exp is optional
  size_t need = 0;
  ASSERT_TRUE(ivf_attention_workspace_size(a.index, a.queries, a.params, a.extra, &need).ok());
  EXPECT_TRUE(FailsWith(ivf_attention(a.index, a.queries, a.params, a.extra, a.out, nullptr,
                                      fake(0x60000000), need - 256, nullptr),
                        StatusCode::kWorkspaceTooSmall, {"ivf_attention"}));
  a = Attend();
  a.queries.n_queries = 0;  // nothing to do, nothing touched
  a.out = nullptr;
  a.lse = nullptr;
  EXPECT_TRUE(a.run().ok());
}

TEST(IvfClustersValidation, Arguments) {
  const IvfIndex index = BuiltIndex();
  const IvfQueries queries = SomeQueries();
  IvfProbeParams params;
  params.n_probe = 0;
  size_t bytes = 0;
  EXPECT_TRUE(FailsWith(ivf_clusters_workspace_size(index, queries, params, &bytes),
                        StatusCode::kInvalidArgument, {"params.n_probe"}));
  params.n_probe = 8;
  ASSERT_TRUE(ivf_clusters_workspace_size(index, queries, params, &bytes).ok());
  EXPECT_TRUE(
      FailsWith(ivf_clusters(index, queries, params, nullptr, fake(0x60000000), bytes, nullptr),
                StatusCode::kInvalidArgument, {"d_clusters"}));
  EXPECT_TRUE(
      FailsWith(ivf_clusters(index, queries, params, static_cast<int32_t*>(fake(0x50000000)),
                             fake(0x60000000), bytes - 1, nullptr),
                StatusCode::kWorkspaceTooSmall, {"ivf_clusters_workspace_size"}));
  size_t per_head = 0;
  params.group = false;
  ASSERT_TRUE(ivf_clusters_workspace_size(index, queries, params, &per_head).ok());
  EXPECT_NE(per_head, bytes);  // rows per query head, no softmax weights
}

TEST(IvfExtendValidation, Room) {
  IvfIndex index;
  index.shape = Shape();  // capacity 5000, 96 clusters
  index.data = fake(0x10000000);
  index.tokens = 4096;
  index.n_clusters = 64;
  IvfInput input;
  input.keys = fake(0x40000000);
  input.values = fake(0x50000000);
  input.seq = 904;  // all the room there is
  IvfExtendParams params;
  params.n_clusters = 16;
  size_t bytes = 0;
  EXPECT_TRUE(ivf_extend_workspace_size(index, input, params, &bytes).ok());
  input.seq = 905;  // 904 tokens of room
  EXPECT_TRUE(FailsWith(ivf_extend_workspace_size(index, input, params, &bytes),
                        StatusCode::kInvalidArgument, {"input.seq", "room (904"}));
  input.seq = 800;
  params.n_clusters = 33;  // 32 clusters of room
  EXPECT_TRUE(FailsWith(ivf_extend_workspace_size(index, input, params, &bytes),
                        StatusCode::kInvalidArgument, {"params.n_clusters", "(32)"}));
  params.n_clusters = 8;
  input.values = nullptr;
  EXPECT_TRUE(
      FailsWith(ivf_extend(input, params, &index, fake(0x60000000), size_t{1} << 30, nullptr),
                StatusCode::kInvalidArgument, {"ivf_extend", "input.values"}));
  input.values = fake(0x50000000);
  index.n_clusters = 0;
  EXPECT_TRUE(
      FailsWith(ivf_extend(input, params, &index, fake(0x60000000), size_t{1} << 30, nullptr),
                StatusCode::kInvalidArgument, {"a built index"}));
}

TEST(IvfCopyValidation, ShapesAndMemory) {
  IvfIndex from;
  from.shape = Shape();  // capacity 5000, 96 clusters
  from.data = fake(0x10000000);
  from.tokens = 4096;
  from.n_clusters = 64;
  IvfIndex to;
  to.shape = from.shape;
  to.shape.capacity = 4095;  // one token short
  to.data = fake(0x80000000);
  EXPECT_TRUE(FailsWith(ivf_copy(from, nullptr, nullptr), StatusCode::kInvalidArgument,
                        {"ivf_copy", "to must not be null"}));
  EXPECT_TRUE(FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument,
                        {"capacity 4095", "4096 tokens and 64 clusters"}));
  to.shape.capacity = 4096;
  to.shape.max_clusters = 63;
  EXPECT_TRUE(
      FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument, {"max_clusters 63"}));
  to.shape.max_clusters = 64;
  to.shape.value_dim = 32;
  EXPECT_TRUE(FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument,
                        {"heads, dim, value_dim and dtype"}));
  to.shape.value_dim = from.shape.value_dim;
  to.shape.dtype = DType::kBFloat16;
  EXPECT_TRUE(FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument,
                        {"heads, dim, value_dim and dtype"}));
  to.shape.dtype = from.shape.dtype;
  to.data = nullptr;
  EXPECT_TRUE(FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument,
                        {"to->data must not be null"}));
  to.data = fake(0x80000010);
  EXPECT_TRUE(FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kMisaligned,
                        {"to->data", "256-byte aligned"}));
  to.data = fake(0x10000100);  // inside from's buffer
  EXPECT_TRUE(
      FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument, {"must not overlap"}));
  from.n_clusters = 0;  // nothing built
  to.data = fake(0x80000000);
  EXPECT_TRUE(
      FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument, {"a built index"}));
  from.n_clusters = 64;
  to.shape.heads = 0;
  EXPECT_TRUE(
      FailsWith(ivf_copy(from, &to, nullptr), StatusCode::kInvalidArgument, {"ivf_copy", "heads"}));
}

}  // namespace
}  // namespace cudaops
