#pragma once

// Named, seeded models of attention keys and decode queries for the CLI, the benches and the
// tests (`--keys_model`), the same models as bench/key_models.py (whose text says why each is
// so; the random streams differ):
//   mix8      eight directions a head around a common offset, noise 0.3; queries near keys;
//   gaussian  isotropic N(0, 1) keys; Gaussian queries;
//   llm       a per-head offset, four outlier channels, rank-32 content with a decaying spectrum
//             that drifts along the sequence (topics every ~2000 tokens, AR(1) with rho 0.98),
//             noise, RoPE (base 10000) by position; queries the content of recent positions
//             roped at the decode position.
// gaussian and llm queries are scaled so that q . k / sqrt(D) spreads with a standard deviation
// of 2.5 over the head's keys.
#include <cstdint>

#include "reference/host_array.h"

namespace cudaops::harness {

enum class KeyModel : int64_t { kMix8 = 0, kGaussian = 1, kLlm = 2 };

/// keys [heads, tokens, dim] of `model` (any float dtype of `keys`, sized by the caller).
void draw_keys(KeyModel model, uint64_t seed, int64_t heads, int64_t tokens, int64_t dim,
               ref::HostArray* keys);

/// queries [q_heads, n_queries, dim] for the keys draw_keys made with the same model and seed
/// (query head g reads kv head g / (q_heads / heads)).
void draw_queries(KeyModel model, uint64_t seed, const ref::HostArray& keys, int64_t heads,
                  int64_t tokens, int64_t dim, int64_t q_heads, int64_t n_queries,
                  ref::HostArray* queries);

}  // namespace cudaops::harness
