#include "harness/key_models.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace cudaops::harness {
namespace {

constexpr int kRank = 32;
constexpr double kRopeBase = 10000.0;
constexpr double kLogitStd = 2.5;

/// What an llm head is made of: drawn in a fixed order from its own generator, so that the
/// queries can draw it again without the keys.
struct LlmHead {
  std::vector<double> offset, basis, spectrum,
      latent;  // basis [dim, kRank], latent [tokens, kRank]
  std::vector<int64_t> outliers;
  std::vector<double> outlier_values;
  std::mt19937_64 rng;
};

LlmHead make_llm_head(uint64_t seed, int64_t h, int64_t tokens, int64_t dim) {
  LlmHead x;
  x.rng.seed(seed * 1000003 + static_cast<uint64_t>(h) * 7919 + 17);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  x.offset.resize(static_cast<size_t>(dim));
  for (double& v : x.offset)
    v = 0.5 * normal(x.rng);
  for (int i = 0; i < 4 && i < dim; ++i) {
    int64_t c = 0;
    do {
      c = static_cast<int64_t>(x.rng() % static_cast<uint64_t>(dim));
    } while (std::find(x.outliers.begin(), x.outliers.end(), c) != x.outliers.end());
    x.outliers.push_back(c);
    x.outlier_values.push_back((5.0 + 5.0 * uniform(x.rng)) * (x.rng() % 2 == 0 ? 1.0 : -1.0));
  }
  // An orthonormal basis by Gram-Schmidt of Gaussian columns.
  const int rank = static_cast<int>(std::min<int64_t>(kRank, dim));
  x.basis.assign(static_cast<size_t>(dim * kRank), 0.0);
  for (int j = 0; j < rank; ++j) {
    std::vector<double> col(static_cast<size_t>(dim));
    for (double& v : col)
      v = normal(x.rng);
    for (int i = 0; i < j; ++i) {
      double dot = 0.0;
      for (int64_t e = 0; e < dim; ++e)
        dot += col[e] * x.basis[e * kRank + i];
      for (int64_t e = 0; e < dim; ++e)
        col[e] -= dot * x.basis[e * kRank + i];
    }
    double norm = 0.0;
    for (double v : col)
      norm += v * v;
    norm = std::sqrt(std::max(norm, 1e-30));
    for (int64_t e = 0; e < dim; ++e)
      x.basis[e * kRank + j] = col[e] / norm;
  }
  x.spectrum.resize(kRank);
  for (int j = 0; j < kRank; ++j)
    x.spectrum[j] = 3.0 * std::pow(0.85, j);
  // Topics of geometric lengths (mean 2000 tokens) and an AR(1) drift (rho 0.98, variance 0.4).
  const double rho = 0.98, step = std::sqrt(0.4 * (1 - rho * rho));
  x.latent.resize(static_cast<size_t>(tokens * kRank));
  std::vector<double> topic(kRank), drift(kRank, 0.0);
  for (double& v : topic)
    v = 0.6 * normal(x.rng);
  for (int64_t t = 0; t < tokens; ++t) {
    if (uniform(x.rng) < 1.0 / 2000.0) {
      for (double& v : topic)
        v = 0.6 * normal(x.rng);
    }
    for (int j = 0; j < kRank; ++j) {
      drift[j] = rho * drift[j] + step * normal(x.rng);
      x.latent[t * kRank + j] = topic[j] + drift[j];
    }
  }
  return x;
}

/// x [dim] rotated by RoPE at `position` (the halves of dim paired).
void rope(std::vector<double>* x, int64_t position) {
  const int64_t dim = static_cast<int64_t>(x->size()), half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle =
        static_cast<double>(position) *
        std::pow(kRopeBase, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = (*x)[i], b = (*x)[i + half];
    (*x)[i] = a * c - b * s;
    (*x)[i + half] = a * s + b * c;
  }
}

/// content = basis (spectrum * latent) of one position.
std::vector<double> content(const LlmHead& x, const double* latent, int64_t dim) {
  std::vector<double> out(static_cast<size_t>(dim), 0.0);
  for (int64_t e = 0; e < dim; ++e) {
    for (int j = 0; j < kRank; ++j)
      out[e] += x.basis[e * kRank + j] * x.spectrum[j] * latent[j];
  }
  return out;
}

/// The query rows of head h scaled so that their logits over (a sample of) the head's keys
/// spread with a standard deviation of kLogitStd.
void scale_to_logit_std(const ref::HostArray& keys, int64_t h, int64_t tokens, int64_t dim,
                        std::vector<double>* q) {
  const int64_t step = std::max<int64_t>(1, tokens / 8192);
  double sum = 0.0, sum2 = 0.0;
  int64_t n = 0;
  for (int64_t t = 0; t < tokens; t += step, ++n) {
    double dot = 0.0;
    for (int64_t e = 0; e < dim; ++e)
      dot += (*q)[e] * keys.get((h * tokens + t) * dim + e);
    dot /= std::sqrt(static_cast<double>(dim));
    sum += dot;
    sum2 += dot * dot;
  }
  const double mean = sum / static_cast<double>(n);
  const double std = std::sqrt(std::max(sum2 / static_cast<double>(n) - mean * mean, 1e-30));
  for (double& v : *q)
    v *= kLogitStd / std;
}

}  // namespace

void draw_keys(KeyModel model, uint64_t seed, int64_t heads, int64_t tokens, int64_t dim,
               ref::HostArray* keys) {
  for (int64_t h = 0; h < heads; ++h) {
    if (model == KeyModel::kLlm) {
      LlmHead x = make_llm_head(seed, h, tokens, dim);
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<double> k = content(x, &x.latent[t * kRank], dim);
        for (int64_t e = 0; e < dim; ++e)
          k[e] += x.offset[e] + 0.2 * normal(x.rng);
        for (size_t i = 0; i < x.outliers.size(); ++i)
          k[x.outliers[i]] = x.outlier_values[i] + 0.5 * normal(x.rng);
        rope(&k, t);
        for (int64_t e = 0; e < dim; ++e)
          keys->set((h * tokens + t) * dim + e, k[e]);
      }
      continue;
    }
    std::mt19937_64 rng(seed * 104729 + static_cast<uint64_t>(h) * 31 + 3);
    std::normal_distribution<double> normal(0.0, 1.0);
    if (model == KeyModel::kGaussian) {
      for (int64_t i = 0; i < tokens * dim; ++i)
        keys->set(h * tokens * dim + i, normal(rng));
      continue;
    }
    std::vector<double> offset(static_cast<size_t>(dim)), dirs(static_cast<size_t>(8 * dim));
    for (double& v : offset)
      v = 2.0 + 0.5 * normal(rng);
    for (double& v : dirs)
      v = normal(rng);
    for (int64_t t = 0; t < tokens; ++t) {
      const auto which = static_cast<int64_t>(rng() % 8);
      for (int64_t e = 0; e < dim; ++e) {
        keys->set((h * tokens + t) * dim + e,
                  offset[e] + dirs[which * dim + e] + 0.3 * normal(rng));
      }
    }
  }
}

void draw_queries(KeyModel model, uint64_t seed, const ref::HostArray& keys, int64_t heads,
                  int64_t tokens, int64_t dim, int64_t q_heads, int64_t n_queries,
                  ref::HostArray* queries) {
  const int64_t group = q_heads / heads;
  std::mt19937_64 rng(seed * 7 + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t h = 0; h < heads; ++h) {
    LlmHead head;
    if (model == KeyModel::kLlm) head = make_llm_head(seed, h, tokens, dim);
    for (int64_t r = h * group * n_queries; r < (h + 1) * group * n_queries; ++r) {
      std::vector<double> q(static_cast<size_t>(dim));
      if (model == KeyModel::kLlm) {
        // The content of a recent position (lag 0 to 63), jittered, roped at `tokens`.
        const int64_t lag = static_cast<int64_t>(rng() % 64);
        const int64_t at = std::max<int64_t>(tokens - 1 - lag, 0);
        std::vector<double> latent(kRank);
        for (int j = 0; j < kRank; ++j)
          latent[j] = head.latent[at * kRank + j] + 0.3 * normal(rng);
        q = content(head, latent.data(), dim);
        rope(&q, tokens);
      } else if (model == KeyModel::kGaussian) {
        for (double& v : q)
          v = normal(rng);
      } else {
        const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(tokens));
        for (int64_t e = 0; e < dim; ++e)
          q[e] = keys.get((h * tokens + t) * dim + e) + 0.3 * normal(rng);
      }
      if (model != KeyModel::kMix8) scale_to_logit_std(keys, h, tokens, dim, &q);
      for (int64_t e = 0; e < dim; ++e)
        queries->set(r * dim + e, q[e]);
    }
  }
}

}  // namespace cudaops::harness
