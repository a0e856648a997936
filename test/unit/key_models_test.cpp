// The harness's key models (harness/key_models.h): seeded, and their statistics as documented
// (the logits' spread, llm's outlier channels and position dependence).
#include "harness/key_models.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace cudaops::harness {
namespace {

double LogitStd(const ref::HostArray& keys, const ref::HostArray& q, int64_t row, int64_t h,
                int64_t tokens, int64_t dim) {
  double sum = 0.0, sum2 = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    double dot = 0.0;
    for (int64_t e = 0; e < dim; ++e)
      dot += q.get(row * dim + e) * keys.get((h * tokens + t) * dim + e);
    dot /= std::sqrt(static_cast<double>(dim));
    sum += dot;
    sum2 += dot * dot;
  }
  const double mean = sum / static_cast<double>(tokens);
  return std::sqrt(sum2 / static_cast<double>(tokens) - mean * mean);
}

TEST(KeyModels, SeededWithTheLogitSpreadAsDocumented) {
  const int64_t heads = 2, tokens = 4096, dim = 64, q_heads = 4;
  for (KeyModel model : {KeyModel::kMix8, KeyModel::kGaussian, KeyModel::kLlm}) {
    ref::HostArray keys(DType::kFloat32, heads * tokens * dim), again(DType::kFloat32, keys.size());
    draw_keys(model, 3, heads, tokens, dim, &keys);
    draw_keys(model, 3, heads, tokens, dim, &again);
    EXPECT_EQ(keys.to_double(), again.to_double());
    ref::HostArray q(DType::kFloat32, q_heads * dim);
    draw_queries(model, 3, keys, heads, tokens, dim, q_heads, 1, &q);
    if (model == KeyModel::kMix8) continue;
    for (int64_t g = 0; g < q_heads; ++g) {
      EXPECT_NEAR(LogitStd(keys, q, g, g / 2, tokens, dim), 2.5, 0.2)
          << static_cast<int>(model) << " query head " << g;
    }
  }
}

TEST(KeyModels, LlmHasOutlierChannels) {
  const int64_t tokens = 8192, dim = 64;
  ref::HostArray keys(DType::kFloat32, tokens * dim);
  draw_keys(KeyModel::kLlm, 5, 1, tokens, dim, &keys);
  // RoPE spreads an outlier channel over its pair: the pairs' energy.
  std::vector<double> energy(static_cast<size_t>(dim / 2), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double a = keys.get(t * dim + i), b = keys.get(t * dim + i + dim / 2);
      energy[i] += (a * a + b * b) / static_cast<double>(tokens);
    }
  }
  std::vector<double> sorted = energy;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(sorted[sorted.size() - 1], 20.0);
  EXPECT_LT(sorted[sorted.size() / 2], 5.0);
  // Queries are drawn for the keys, finite and not all zero.
  ref::HostArray q(DType::kFloat32, dim);
  draw_queries(KeyModel::kLlm, 5, keys, 1, tokens, dim, 1, 1, &q);
  double norm = 0.0;
  for (int64_t e = 0; e < dim; ++e)
    norm += q.get(e) * q.get(e);
  EXPECT_TRUE(std::isfinite(norm) && norm > 0.0);
}

}  // namespace
}  // namespace cudaops::harness
