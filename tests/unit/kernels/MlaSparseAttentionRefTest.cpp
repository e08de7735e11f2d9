// Tests of NoPE MLA over a selected token set: the absorbed reference against the expanded
// formula (K, V per head from kv_b, dqk ≠ dv), set semantics, causality, chunked appends.
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace glm::kernels {
namespace {

constexpr int64_t kHeads = 3, kDqk = 6, kDv = 5, kRank = 7;

struct MlaCase {
  int64_t tokens, width;
  std::vector<float> q, latent, kvB;
  std::vector<int32_t> selected;
};

/// Random selections: causal positions with a −1 and a duplicate thrown in.
MlaCase randomCase(uint64_t seed, int64_t tokens, int64_t width) {
  SplitMix64 rng(seed);
  MlaCase c{tokens, width};
  c.q = randomFloats(rng, tokens * kHeads * kDqk);
  c.latent = randomFloats(rng, tokens * kRank);
  c.kvB = randomFloats(rng, kHeads * (kDqk + kDv) * kRank, 0.5f);
  c.selected.resize(tokens * width);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < width; ++s) {
      const uint64_t roll = rng.below(8);
      c.selected[t * width + s] = roll == 0 ? -1 : static_cast<int32_t>(rng.below(t + 1));
    }
    c.selected[t * width] = static_cast<int32_t>(t);     // the query itself
    c.selected[t * width + 1] = static_cast<int32_t>(t); // ... twice
  }
  return c;
}

struct OwnedLatents {
  explicit OwnedLatents(int64_t tokens) : rows(tokens * kRank) {
    cache.latents = rows.data();
    cache.maxTokens = tokens;
  }
  std::vector<float> rows;
  MlaLatentCache cache;
};

std::vector<float> run(const MlaCase &c, MlaLatentCache &cache, int64_t t0, int64_t t1,
                       Status *status = nullptr) {
  const int64_t n = t1 - t0;
  std::vector<float> out(n * kHeads * kDv, -7.0f);
  const Status s =
      mlaSparseAttentionRef({.q = c.q.data() + t0 * kHeads * kDqk,
                             .latent = c.latent.data() + t0 * kRank,
                             .kvB = WeightView::f32(c.kvB.data(), {kHeads * (kDqk + kDv), kRank}),
                             .selected = c.selected.data() + t0 * c.width,
                             .cache = &cache,
                             .out = out.data(),
                             .tokens = n,
                             .heads = kHeads,
                             .qkHeadDim = kDqk,
                             .vHeadDim = kDv,
                             .kvLoraRank = kRank,
                             .selectedWidth = c.width,
                             .scale = 1.0f / std::sqrt(float(kDqk))});
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  return out;
}

/// Expanded form: K_j = Wk_h c_j, V_j = Wv_h c_j, softmax over the distinct selected positions.
std::vector<float> expanded(const MlaCase &c) {
  std::vector<float> out(c.tokens * kHeads * kDv);
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::set<int32_t> sel;
    for (int64_t s = 0; s < c.width; ++s) {
      if (c.selected[t * c.width + s] >= 0) {
        sel.insert(c.selected[t * c.width + s]);
      }
    }
    for (int64_t h = 0; h < kHeads; ++h) {
      const float *wk = &c.kvB[h * (kDqk + kDv) * kRank];
      const float *wv = wk + kDqk * kRank;
      std::vector<double> scores, values;
      for (int32_t j : sel) {
        double score = 0.0;
        for (int64_t e = 0; e < kDqk; ++e) {
          double key = 0.0;
          for (int64_t r = 0; r < kRank; ++r) {
            key += wk[e * kRank + r] * c.latent[j * kRank + r];
          }
          score += c.q[(t * kHeads + h) * kDqk + e] * key;
        }
        scores.push_back(score / std::sqrt(double(kDqk)));
      }
      double peak = -INFINITY, sum = 0.0;
      for (double s : scores) {
        peak = std::max(peak, s);
      }
      for (double &s : scores) {
        s = std::exp(s - peak);
        sum += s;
      }
      for (int64_t e = 0; e < kDv; ++e) {
        double o = 0.0;
        size_t idx = 0;
        for (int32_t j : sel) {
          double value = 0.0;
          for (int64_t r = 0; r < kRank; ++r) {
            value += wv[e * kRank + r] * c.latent[j * kRank + r];
          }
          o += scores[idx++] / sum * value;
        }
        out[(t * kHeads + h) * kDv + e] = static_cast<float>(o);
      }
    }
  }
  return out;
}

TEST(MlaSparseAttentionRef, AbsorbedEqualsExpandedOverTheSelectedSet) {
  const MlaCase c = randomCase(51, 12, 6);
  OwnedLatents latents(c.tokens);
  EXPECT_LE(maxRelativeError(run(c, latents.cache, 0, c.tokens), expanded(c)), 1e-5);
  EXPECT_EQ(latents.cache.length, c.tokens);
  EXPECT_EQ(latents.rows, c.latent);
}

TEST(MlaSparseAttentionRef, ChunkedAppendsEqualOneCall) {
  const MlaCase c = randomCase(52, 10, 4);
  OwnedLatents once(c.tokens);
  const std::vector<float> whole = run(c, once.cache, 0, c.tokens);
  OwnedLatents chunked(c.tokens);
  std::vector<float> parts;
  for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}, {4, 10}}) {
    const std::vector<float> part = run(c, chunked.cache, t0, t1);
    parts.insert(parts.end(), part.begin(), part.end());
  }
  EXPECT_EQ(parts, whole);
}

TEST(MlaSparseAttentionRef, NothingSelectedGivesZeros) {
  MlaCase c = randomCase(53, 2, 3);
  std::fill(c.selected.begin() + 3, c.selected.end(), -1); // token 1 selects nothing
  OwnedLatents latents(2);
  const std::vector<float> out = run(c, latents.cache, 0, 2);
  for (int64_t i = kHeads * kDv; i < 2 * kHeads * kDv; ++i) {
    EXPECT_EQ(out[i], 0.0f);
  }
}

TEST(MlaSparseAttentionRef, RejectsAFuturePosition) {
  MlaCase c = randomCase(54, 3, 2);
  c.selected[1 * 2 + 1] = 2; // token 1 may not see token 2
  OwnedLatents latents(3);
  Status s;
  run(c, latents.cache, 0, 3, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not causally visible"), std::string::npos) << s.message();
  EXPECT_EQ(latents.cache.length, 0) << "a refused call must not append";
}

} // namespace
} // namespace glm::kernels
