// One decode step over an IVF index, from C++: size the index, build it from a KV cache, attend
// a query batch to its best clusters (and estimate the next ones), save it and load it back.
// Every call returns a Status; the library allocates nothing, so the caller sizes each buffer
// first (ivf_index_size, the *_workspace_size queries). Exits 77 without a usable GPU.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cudaops/cudaops.h>

namespace {

// Stops the example at the first failed call, saying which and why.
void check(const cudaops::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes < 256 ? 256 : bytes) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
    std::exit(1);
  }
  return p;
}

std::vector<__half> random_halves(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<__half> out(n);
  for (auto& v : out)
    v = __float2half(normal(rng));
  return out;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no usable CUDA device: skipped\n");
    return 77;
  }
  // A KV cache of 8 kv heads x 16384 tokens x 128, float16, as [kv_heads, tokens, dim].
  const int64_t heads = 8, tokens = 16384, dim = 128, q_heads = 32;
  std::mt19937 rng(1);
  const auto host_keys = random_halves(heads * tokens * dim, rng);
  const auto host_values = random_halves(heads * tokens * dim, rng);
  const auto host_queries = random_halves(q_heads * dim, rng);

  // 1. The index's one buffer, with room for 4096 more tokens and 256 more clusters a head.
  cudaops::IvfIndex index;
  index.shape = {heads, dim, dim, tokens + 4096, 1024 + 256, cudaops::DType::kFloat16};
  cudaops::IvfLayout layout;
  check(cudaops::ivf_index_size(index.shape, &layout), "ivf_index_size");
  index.data = device_alloc(layout.bytes);

  // 2. Build: 1024 clusters a head, by 8 segments.
  cudaops::IvfInput input;
  input.keys = device_alloc(host_keys.size() * 2);
  input.values = device_alloc(host_values.size() * 2);
  input.seq = tokens;
  cudaMemcpy(const_cast<void*>(input.keys), host_keys.data(), host_keys.size() * 2,
             cudaMemcpyHostToDevice);
  cudaMemcpy(const_cast<void*>(input.values), host_values.data(), host_values.size() * 2,
             cudaMemcpyHostToDevice);
  cudaops::IvfBuildParams build;
  build.n_clusters = 1024;
  build.n_segments = 8;
  size_t bytes = 0;
  check(cudaops::ivf_build_workspace_size(index.shape, input, build, &bytes), "build size");
  void* workspace = device_alloc(bytes);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  check(cudaops::ivf_build(input, build, &index, workspace, bytes, stream), "ivf_build");
  cudaFree(workspace);

  // 3. The decode step: 32 query heads, one query each; 1.8% of the clusters exactly, the next
  // 23.2% estimated.
  cudaops::IvfQueries queries;
  queries.data = device_alloc(host_queries.size() * 2);
  queries.q_heads = q_heads;
  queries.n_queries = 1;
  cudaMemcpy(const_cast<void*>(queries.data), host_queries.data(), host_queries.size() * 2,
             cudaMemcpyHostToDevice);
  cudaops::IvfAttentionParams attend;
  attend.n_probe = 18;
  attend.n_estimate = 238;
  cudaops::IvfExtra extra;  // no tokens outside the index in this example
  check(cudaops::ivf_attention_workspace_size(index, queries, attend, extra, &bytes),
        "attention size");
  workspace = device_alloc(bytes);
  void* out = device_alloc(q_heads * dim * 2);
  auto* lse = static_cast<float*>(device_alloc(q_heads * 4));
  check(cudaops::ivf_attention(index, queries, attend, extra, out, lse, workspace, bytes, stream),
        "ivf_attention");
  std::vector<float> host_lse(q_heads);
  cudaMemcpyAsync(host_lse.data(), lse, q_heads * 4, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  std::printf("attended: query head 0's log-sum-exp %.3f\n", host_lse[0]);

  // 4. Save and load into a second buffer of the same shape.
  check(cudaops::ivf_save(index, "decode_step.ivf", stream), "ivf_save");
  cudaops::IvfIndex loaded;
  loaded.shape = index.shape;
  loaded.data = device_alloc(layout.bytes);
  check(cudaops::ivf_load("decode_step.ivf", &loaded, stream), "ivf_load");
  std::printf("loaded: %lld tokens in %lld clusters a head\n",
              static_cast<long long>(loaded.tokens), static_cast<long long>(loaded.n_clusters));
  std::remove("decode_step.ivf");
  return 0;
}
