// cudaops ivf build|search|bench: the IVF index over attention keys, from .npy files or from
// synthetic keys (a mixture of directions per head with a common offset, as attention keys are).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cudaops/ivf.h"
#include "harness/device_buffer.h"
#include "harness/npy.h"
#include "harness/timing.h"
#include "reference/host_array.h"

namespace cudaops::cli {
namespace {

using harness::DeviceBuffer;
using ref::HostArray;

struct IvfOptions {
  std::string keys, values, queries, index, out;
  int64_t heads = 8, seq = 32768, dim = 128;
  std::string dtype = "float16";
  bool no_values = false;
  int64_t clusters = 2048, segments = 4;
  int n_iters = 10;
  bool segments_only = false;
  bool dense = false;
  int64_t q_heads = 0, n_queries = 1, k = 100;
  std::vector<int64_t> n_probe;
  int build_iters = 3, iters = 50;
  uint64_t seed = 1;
  int device = 0;
};

void check(const Status& s, const char* doing) {
  if (!s.ok()) throw UsageError{std::string(doing) + ": " + s.message()};
}

DType parse_dtype(const std::string& text) {
  if (text == "float16") return DType::kFloat16;
  if (text == "bfloat16") return DType::kBFloat16;
  throw UsageError{"--dtype must be float16 or bfloat16, got '" + text + "'"};
}

/// A [a, b, c] array from a .npy file (float16 as it is, float32 rounded to `dtype`).
HostArray load_npy(const std::string& path, DType dtype, const char* what,
                   std::vector<int64_t>* shape) {
  harness::NpyArray a;
  if (Status s = harness::read_npy(path, &a); !s.ok()) throw UsageError{s.message()};
  if (a.shape.size() != 3) {
    throw UsageError{std::string(what) + " " + path + ": expected 3 dimensions, got " +
                     std::to_string(a.shape.size())};
  }
  *shape = a.shape;
  const int64_t n = a.shape[0] * a.shape[1] * a.shape[2];
  if (a.dtype == DType::kFloat16 && dtype == DType::kFloat16) {
    HostArray out(dtype, n);
    std::copy(a.data.begin(), a.data.end(), static_cast<unsigned char*>(out.data()));
    return out;
  }
  HostArray in(a.dtype, n), out(dtype, n);
  std::copy(a.data.begin(), a.data.end(), static_cast<unsigned char*>(in.data()));
  for (int64_t i = 0; i < n; ++i)
    out.set(i, in.get(i));
  return out;
}

/// Keys as attention keys look (a large common offset plus one of 64 directions per head and
/// noise): two heads drawn, the rest copies of them, so that large shapes are made quickly.
HostArray synthetic_keys(const IvfOptions& o, DType dtype) {
  HostArray keys(dtype, o.heads * o.seq * o.dim);
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t drawn = std::min<int64_t>(o.heads, 2), head = o.seq * o.dim;
  std::vector<double> offset(static_cast<size_t>(o.dim)), dirs(static_cast<size_t>(64 * o.dim));
  for (int64_t h = 0; h < drawn; ++h) {
    for (double& v : offset)
      v = 2.0 + 0.5 * normal(rng);
    for (double& v : dirs)
      v = normal(rng);
    for (int64_t t = 0; t < o.seq; ++t) {
      const auto which = static_cast<int64_t>(rng() % 64);
      for (int64_t e = 0; e < o.dim; ++e)
        keys.set(h * head + t * o.dim + e, offset[e] + dirs[which * o.dim + e] + 0.3 * normal(rng));
    }
  }
  auto* bytes = static_cast<unsigned char*>(keys.data());
  const int64_t head_bytes = head * dtype_size(dtype);
  for (int64_t h = drawn; h < o.heads; ++h)
    std::copy(bytes + (h % drawn) * head_bytes, bytes + (h % drawn + 1) * head_bytes,
              bytes + h * head_bytes);
  return keys;
}

void upload(DeviceBuffer* d, const HostArray& host) {
  check(d->allocate(std::max<int64_t>(host.size_bytes(), 256)), "allocating device memory");
  if (cudaMemcpy(d->get(), host.data(), static_cast<size_t>(host.size_bytes()),
                 cudaMemcpyHostToDevice) != cudaSuccess) {
    throw UsageError{"copying to the device failed"};
  }
}

/// An index on the device and the buffer it lives in.
struct DeviceIndex {
  IvfIndex index;
  DeviceBuffer buffer;
};

IvfBuildParams build_params(const IvfOptions& o) {
  IvfBuildParams params;
  params.n_clusters = o.clusters;
  params.n_segments = o.segments;
  params.n_iters = o.n_iters;
  params.global_pass = !o.segments_only;
  params.prune = !o.dense;
  return params;
}

/// The keys (and values) to build from, on the host, and the shape they give.
struct HostData {
  HostArray keys{DType::kFloat16, 0};
  HostArray values{DType::kFloat16, 0};
  IvfShape shape;
};

/// Reads or makes the keys and values (before any device is touched, so that a bad file is a
/// usage error on any machine).
HostData load_host(const IvfOptions& o) {
  const DType dtype = parse_dtype(o.dtype);
  HostData h;
  IvfShape& shape = h.shape;
  if (!o.keys.empty()) {
    std::vector<int64_t> ks, vs;
    h.keys = load_npy(o.keys, dtype, "--keys", &ks);
    shape.heads = ks[0];
    shape.dim = ks[2];
    if (!o.values.empty()) {
      h.values = load_npy(o.values, dtype, "--values", &vs);
      if (vs[0] != ks[0] || vs[1] != ks[1]) {
        throw UsageError{"--values: expected [heads, tokens] of the keys"};
      }
      shape.value_dim = vs[2];
    }
    shape.capacity = ks[1];
  } else {
    h.keys = synthetic_keys(o, dtype);
    shape.heads = o.heads;
    shape.dim = o.dim;
    shape.capacity = o.seq;
    if (!o.no_values) {
      h.values = h.keys;  // any numbers do
      shape.value_dim = o.dim;
    }
  }
  shape.max_clusters = o.clusters;
  shape.dtype = dtype;
  IvfLayout layout;
  size_t bytes = 0;
  IvfInput input;
  input.seq = shape.capacity;
  check(ivf_index_size(shape, &layout), "ivf build");
  check(ivf_build_workspace_size(shape, input, build_params(o), &bytes), "ivf build");
  return h;
}

/// Builds from the host data, prints what it took, saves with --out.
void build(const IvfOptions& o, const HostData& h, DeviceIndex* out) {
  const DType dtype = h.shape.dtype;
  const HostArray& keys = h.keys;
  const HostArray& values = h.values;
  IvfShape& shape = out->index.shape;
  shape = h.shape;
  IvfInput input;
  input.seq = shape.capacity;
  const IvfBuildParams params = build_params(o);
  IvfLayout layout;
  size_t bytes = 0;
  check(ivf_index_size(shape, &layout), "ivf build");
  check(ivf_build_workspace_size(shape, input, params, &bytes), "ivf build");
  DeviceBuffer d_keys, d_values, workspace;
  upload(&d_keys, keys);
  if (shape.value_dim > 0) upload(&d_values, values);
  check(out->buffer.allocate(static_cast<int64_t>(layout.bytes)), "allocating the index");
  check(workspace.allocate(static_cast<int64_t>(bytes)), "allocating the workspace");
  out->index.data = out->buffer.get();
  input.keys = d_keys.get();
  input.values = shape.value_dim > 0 ? d_values.get() : nullptr;
  harness::Timing t;
  check(harness::time_on_stream(
            [&](cudaStream_t s) {
              return ivf_build(input, params, &out->index, workspace.get(), bytes, s);
            },
            nullptr, 1, o.build_iters, &t),
        "ivf build");
  const double per_token =
      static_cast<double>(layout.bytes) / static_cast<double>(shape.heads * shape.capacity);
  std::printf(
      "built %lld heads x %lld tokens x %lld (%s%s) into %lld clusters per head by %lld "
      "segments, %d iterations%s: %.2f ms (median of %d)\n",
      static_cast<long long>(shape.heads), static_cast<long long>(shape.capacity),
      static_cast<long long>(shape.dim), dtype_name(dtype),
      shape.value_dim > 0 ? ", with values" : "", static_cast<long long>(o.clusters),
      static_cast<long long>(o.segments), o.n_iters, params.global_pass ? ", global pass" : "",
      t.median_ms, t.iterations);
  std::printf("index: %.1f MiB, %.1f bytes per token\n",
              static_cast<double>(layout.bytes) / (1 << 20), per_token);
  if (!o.out.empty()) {
    check(ivf_save(out->index, o.out.c_str(), nullptr), "ivf save");
    std::printf("saved to %s\n", o.out.c_str());
  }
}

void load(const IvfOptions& o, DeviceIndex* out) {
  IvfShape& shape = out->index.shape;
  check(ivf_saved_shape(o.index.c_str(), &shape), "ivf load");
  IvfLayout layout;
  check(ivf_index_size(shape, &layout), "ivf load");
  check(out->buffer.allocate(static_cast<int64_t>(layout.bytes)), "allocating the index");
  out->index.data = out->buffer.get();
  check(ivf_load(o.index.c_str(), &out->index, nullptr), "ivf load");
  std::printf("loaded %s: %lld heads x %lld tokens x %lld in %lld clusters per head\n",
              o.index.c_str(), static_cast<long long>(shape.heads),
              static_cast<long long>(out->index.tokens), static_cast<long long>(shape.dim),
              static_cast<long long>(out->index.n_clusters));
}

/// Queries from --queries, or near the index's own keys (a random token of the query's kv head
/// plus noise).
HostArray make_queries(const IvfOptions& o, const DeviceIndex& d, IvfQueries* q) {
  const IvfShape& s = d.index.shape;
  if (!o.queries.empty()) {
    std::vector<int64_t> qs;
    HostArray queries = load_npy(o.queries, s.dtype, "--queries", &qs);
    if (qs[2] != s.dim || qs[0] % s.heads != 0) {
      throw UsageError{"--queries: expected [q_heads, Q, " + std::to_string(s.dim) +
                       "] with q_heads a multiple of " + std::to_string(s.heads)};
    }
    q->q_heads = qs[0];
    q->n_queries = qs[1];
    return queries;
  }
  q->q_heads = o.q_heads > 0 ? o.q_heads : 4 * s.heads;
  if (q->q_heads % s.heads != 0) {
    throw UsageError{"--q_heads must be a multiple of the index's " + std::to_string(s.heads) +
                     " heads"};
  }
  q->n_queries = o.n_queries;
  IvfLayout layout;
  check(ivf_index_size(s, &layout), "ivf search");
  HostArray keys(s.dtype, s.heads * s.capacity * s.dim);
  if (cudaMemcpy(keys.data(), static_cast<const unsigned char*>(d.index.data) + layout.keys,
                 static_cast<size_t>(keys.size_bytes()), cudaMemcpyDeviceToHost) != cudaSuccess) {
    throw UsageError{"reading the index's keys failed"};
  }
  HostArray queries(s.dtype, q->q_heads * q->n_queries * s.dim);
  std::mt19937_64 rng(o.seed + 7);
  std::normal_distribution<double> normal(0.0, 0.3);
  const int64_t group = q->q_heads / s.heads;
  for (int64_t r = 0; r < q->q_heads * q->n_queries; ++r) {
    const int64_t h = (r / q->n_queries) / group;
    const auto t = static_cast<int64_t>(rng() % static_cast<uint64_t>(d.index.tokens));
    for (int64_t e = 0; e < s.dim; ++e)
      queries.set(r * s.dim + e, keys.get((h * s.capacity + t) * s.dim + e) + normal(rng));
  }
  return queries;
}

/// Times the search at each n_probe and prints its recall@k against probing every cluster (the
/// exact top k).
void search(const IvfOptions& o, const DeviceIndex& d) {
  IvfQueries q;
  const HostArray queries = make_queries(o, d, &q);
  DeviceBuffer d_queries, scores, ids, exact_ids, workspace;
  upload(&d_queries, queries);
  q.data = d_queries.get();
  const int64_t rows = q.q_heads * q.n_queries;
  const int64_t k = std::min({o.k, d.index.tokens, kIvfMaxK});
  std::vector<int64_t> probes = o.n_probe;
  if (probes.empty()) {
    for (double share : {0.01, 0.018, 0.05}) {
      probes.push_back(std::max<int64_t>(
          1, static_cast<int64_t>(share * static_cast<double>(d.index.n_clusters))));
    }
  }
  check(scores.allocate(rows * k * 4), "allocating");
  check(ids.allocate(rows * k * 8), "allocating");
  check(exact_ids.allocate(rows * k * 8), "allocating");
  const auto run = [&](int64_t n_probe, void* out_ids, cudaStream_t stream,
                       harness::Timing* timing) {
    IvfSearchParams params;
    params.k = k;
    params.n_probe = n_probe;
    size_t bytes = 0;
    check(ivf_search_workspace_size(d.index, q, params, &bytes), "ivf search");
    if (workspace.size_bytes() < static_cast<int64_t>(bytes)) {
      workspace.reset();
      check(workspace.allocate(static_cast<int64_t>(bytes)), "allocating the workspace");
    }
    const auto call = [&](cudaStream_t s) {
      return ivf_search(d.index, q, params, scores.as<float>(), static_cast<int64_t*>(out_ids),
                        workspace.get(), bytes, s);
    };
    if (timing != nullptr) {
      check(harness::time_on_stream(call, stream, 5, o.iters, timing), "ivf search");
    } else {
      check(call(stream), "ivf search");
    }
  };
  run(d.index.n_clusters, exact_ids.get(), nullptr, nullptr);
  std::vector<int64_t> exact(static_cast<size_t>(rows * k)), got(exact.size());
  if (cudaMemcpy(exact.data(), exact_ids.get(), exact.size() * 8, cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    throw UsageError{"reading the exact search's results failed"};
  }
  std::printf(
      "\n%lld query heads x %lld queries, k = %lld; recall against probing every "
      "cluster\n\n",
      static_cast<long long>(q.q_heads), static_cast<long long>(q.n_queries),
      static_cast<long long>(k));
  std::printf("| n_probe | of clusters | time (us) | recall@%lld |\n|---:|---:|---:|---:|\n",
              static_cast<long long>(k));
  for (int64_t n_probe : probes) {
    if (n_probe < 1 || n_probe > d.index.n_clusters) {
      throw UsageError{"--n_probe must be from 1 to the index's " +
                       std::to_string(d.index.n_clusters) + " clusters"};
    }
    harness::Timing t;
    run(n_probe, ids.get(), nullptr, &t);
    if (cudaMemcpy(got.data(), ids.get(), got.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
      throw UsageError{"reading the search's results failed"};
    }
    int64_t hits = 0, wanted = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::set<int64_t> want;
      for (int64_t i = 0; i < k; ++i) {
        if (exact[static_cast<size_t>(r * k + i)] >= 0) want.insert(exact[r * k + i]);
      }
      wanted += static_cast<int64_t>(want.size());
      for (int64_t i = 0; i < k; ++i)
        hits += want.count(got[static_cast<size_t>(r * k + i)]) > 0 ? 1 : 0;
    }
    std::printf("| %lld | %.1f%% | %.1f | %.3f |\n", static_cast<long long>(n_probe),
                100.0 * static_cast<double>(n_probe) / static_cast<double>(d.index.n_clusters),
                t.median_ms * 1e3,
                wanted > 0 ? static_cast<double>(hits) / static_cast<double>(wanted) : 1.0);
  }
}

void add_data_options(CLI::App* c, IvfOptions* o) {
  c->add_option("--keys", o->keys, "keys [heads, tokens, dim] from a .npy file (float16/32)");
  c->add_option("--values", o->values, "values [heads, tokens, value_dim] from a .npy file");
  c->add_option("--heads", o->heads, "synthetic keys: kv heads")->check(positive_integer());
  c->add_option("--seq", o->seq, "synthetic keys: tokens per head")->check(positive_integer());
  c->add_option("--dim", o->dim, "synthetic keys: dimensions")->check(positive_integer());
  c->add_flag("--no-values", o->no_values, "synthetic keys: no values");
  c->add_option("--dtype", o->dtype, "float16 or bfloat16 (float32 files are rounded to it)");
  c->add_option("--clusters", o->clusters, "clusters per head")->check(positive_integer());
  c->add_option("--segments", o->segments, "segments per head")->check(positive_integer());
  c->add_option("--n_iters", o->n_iters, "k-means iterations")->check(non_negative_integer());
  c->add_flag("--segments-only", o->segments_only, "no global pass");
  c->add_flag("--dense", o->dense,
              "the global pass against every cluster (no pruning: keys with no structure)");
  c->add_option("--build-iters", o->build_iters, "timed builds")->check(positive_integer());
  c->add_option("--seed", o->seed, "seed of the synthetic data");
}

void add_search_options(CLI::App* c, IvfOptions* o) {
  c->add_option("--queries", o->queries, "queries [q_heads, Q, dim] from a .npy file");
  c->add_option("--q_heads", o->q_heads, "synthetic queries: query heads (default 4 x heads)")
      ->check(positive_integer());
  c->add_option("--n_queries", o->n_queries, "synthetic queries per query head")
      ->check(positive_integer());
  c->add_option("--k", o->k, "tokens per query")->check(positive_integer());
  c->add_option("--n_probe", o->n_probe, "clusters probed (several: a table; default 1%, 1.8%, 5%)")
      ->check(positive_integer());
  c->add_option("--iters", o->iters, "timed searches per n_probe")->check(positive_integer());
}

}  // namespace

Command add_ivf_command(CLI::App& app) {
  auto options = std::make_shared<IvfOptions>();
  CLI::App* ivf =
      app.add_subcommand("ivf", "the IVF index over attention keys: build, search and measure it");
  ivf->require_subcommand(1);
  ivf->add_option("--device", options->device, "CUDA device index")->check(non_negative_integer());
  CLI::App* b = ivf->add_subcommand("build", "build an index (and save it with --out)");
  add_data_options(b, options.get());
  b->add_option("--out", options->out, "save the index to this file");
  CLI::App* s = ivf->add_subcommand("search", "load an index and time its search with recall");
  s->add_option("--index", options->index, "an index file (cudaops ivf build --out)")->required();
  add_search_options(s, options.get());
  CLI::App* m = ivf->add_subcommand(
      "bench", "build, then time the search at several n_probe with recall and bytes per token");
  add_data_options(m, options.get());
  m->add_option("--out", options->out, "save the index to this file");
  add_search_options(m, options.get());
  return {ivf, [options, s, m]() {
            if (!options->values.empty() && options->keys.empty()) {
              throw UsageError{"--values needs --keys"};
            }
            DeviceIndex index;
            if (s->parsed()) {
              IvfShape shape;  // the file's header and table, checked before any device work
              if (Status st = ivf_saved_shape(options->index.c_str(), &shape); !st.ok()) {
                throw UsageError{st.message()};
              }
              if (!select_device(options->device, false)) return kExitNoGpu;
              load(*options, &index);
              search(*options, index);
              return kExitOk;
            }
            const HostData host = load_host(*options);
            if (!select_device(options->device, false)) return kExitNoGpu;
            build(*options, host, &index);
            if (m->parsed()) search(*options, index);
            return kExitOk;
          }};
}

}  // namespace cudaops::cli
