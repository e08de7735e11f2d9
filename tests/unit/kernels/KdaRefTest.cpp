// Tests of the KDA gated delta rule against a matrix-form recurrence written out per element, a
// closed form for the first token, and chunked continuation.
#include "kernels/kda/kda.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

struct KdaCase {
  int64_t tokens, heads, dk, dv;
  std::vector<float> q, k, v, f, b, aLog, dtBias;
};

KdaCase randomCase(uint64_t seed, int64_t tokens, int64_t heads, int64_t dk, int64_t dv) {
  SplitMix64 rng(seed);
  KdaCase c{tokens, heads, dk, dv};
  c.q = randomFloats(rng, tokens * heads * dk);
  c.k = randomFloats(rng, tokens * heads * dk);
  c.v = randomFloats(rng, tokens * heads * dv);
  c.f = randomFloats(rng, tokens * heads * dk);
  c.b = randomFloats(rng, tokens * heads);
  c.aLog = randomFloats(rng, heads, 0.5f);
  c.dtBias = randomFloats(rng, heads * dk, 0.5f);
  return c;
}

/// Runs tokens [t0, t1) of the case through kdaRef with the given state.
std::vector<float> run(const KdaCase &c, std::vector<float> &state, int64_t t0, int64_t t1) {
  const int64_t n = t1 - t0, nh = c.heads;
  std::vector<float> out(n * nh * c.dv);
  EXPECT_TRUE(kdaRef({.q = c.q.data() + t0 * nh * c.dk,
                      .k = c.k.data() + t0 * nh * c.dk,
                      .v = c.v.data() + t0 * nh * c.dv,
                      .f = c.f.data() + t0 * nh * c.dk,
                      .b = c.b.data() + t0 * nh,
                      .aLog = WeightView::f32(c.aLog.data(), {nh}),
                      .dtBias = WeightView::f32(c.dtBias.data(), {nh * c.dk}),
                      .state = state.data(),
                      .out = out.data(),
                      .tokens = n,
                      .heads = nh,
                      .keyDim = c.dk,
                      .valueDim = c.dv,
                      .lowerBound = -5.0f})
                  .ok());
  return out;
}

/// S_t = (I − β k̂ k̂ᵀ) diag(α) S_{t−1} + β k̂ vᵀ,  o_t = S_tᵀ q̂: the delta rule in matrix form,
/// with α = exp(−5·sigmoid(e^A·(f + dt))), written with plain loops.
std::vector<float> naive(const KdaCase &c) {
  const int64_t nh = c.heads, dk = c.dk, dv = c.dv;
  std::vector<float> out(c.tokens * nh * dv);
  for (int64_t h = 0; h < nh; ++h) {
    std::vector<std::vector<float>> s(dk, std::vector<float>(dv, 0.0f));
    for (int64_t t = 0; t < c.tokens; ++t) {
      const float *q = &c.q[(t * nh + h) * dk];
      const float *k = &c.k[(t * nh + h) * dk];
      const float *v = &c.v[(t * nh + h) * dv];
      float qq = 0.0f, kk = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        qq += q[i] * q[i];
        kk += k[i] * k[i];
      }
      std::vector<float> qn(dk), kn(dk), alpha(dk);
      for (int64_t i = 0; i < dk; ++i) {
        qn[i] = q[i] / std::sqrt(qq + 1e-6f) / std::sqrt(static_cast<float>(dk));
        kn[i] = k[i] / std::sqrt(kk + 1e-6f);
        const float x = std::exp(c.aLog[h]) * (c.f[(t * nh + h) * dk + i] + c.dtBias[h * dk + i]);
        alpha[i] = std::exp(-5.0f / (1.0f + std::exp(-x)));
      }
      const float beta = 1.0f / (1.0f + std::exp(-c.b[t * nh + h]));
      // A = diag(α) S;  kᵀA;  S = A − β k (kᵀA) + β k vᵀ.
      std::vector<std::vector<float>> a(dk, std::vector<float>(dv));
      std::vector<float> kTa(dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t j = 0; j < dv; ++j) {
          a[i][j] = alpha[i] * s[i][j];
          kTa[j] += kn[i] * a[i][j];
        }
      }
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t j = 0; j < dv; ++j) {
          s[i][j] = a[i][j] - beta * kn[i] * kTa[j] + beta * kn[i] * v[j];
        }
      }
      for (int64_t j = 0; j < dv; ++j) {
        float o = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
          o += s[i][j] * qn[i];
        }
        out[(t * nh + h) * dv + j] = o;
      }
    }
  }
  return out;
}

TEST(KdaRef, MatchesTheMatrixFormRecurrence) {
  for (const KdaCase &c : {randomCase(31, 9, 3, 8, 8), randomCase(32, 12, 2, 6, 10)}) {
    std::vector<float> state(c.heads * c.dk * c.dv, 0.0f);
    EXPECT_LE(maxRelativeError(run(c, state, 0, c.tokens), naive(c)), 1e-5)
        << "dk " << c.dk << " dv " << c.dv;
  }
}

TEST(KdaRef, FirstTokenFromZeroStateIsBetaTimesKQTimesV) {
  // S_1 = β k̂ vᵀ, so o_1 = β (k̂·q̂) v whatever the gate.
  const KdaCase c = randomCase(33, 1, 2, 4, 3);
  std::vector<float> state(c.heads * c.dk * c.dv, 0.0f);
  const std::vector<float> o = run(c, state, 0, 1);
  for (int64_t h = 0; h < c.heads; ++h) {
    double qq = 0, kk = 0, qk = 0;
    for (int64_t i = 0; i < c.dk; ++i) {
      const double q = c.q[h * c.dk + i], k = c.k[h * c.dk + i];
      qq += q * q;
      kk += k * k;
      qk += q * k;
    }
    const double beta = 1.0 / (1.0 + std::exp(-c.b[h]));
    const double scale = beta * qk / std::sqrt(qq + 1e-6) / std::sqrt(kk + 1e-6) / std::sqrt(4.0);
    for (int64_t j = 0; j < c.dv; ++j) {
      EXPECT_NEAR(o[h * c.dv + j], scale * c.v[h * c.dv + j], 1e-6);
    }
  }
}

TEST(KdaRef, WithoutWritesTheStateOnlyDecays) {
  // β = sigmoid(−100) ≈ 0: S_t = diag(α_t) S_{t−1}, each key row by its own gate in (e^−5, 1).
  KdaCase c = randomCase(34, 1, 1, 4, 2);
  c.b = {-100.0f};
  std::vector<float> state = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> before = state;
  run(c, state, 0, 1);
  for (int64_t i = 0; i < 4; ++i) {
    const double x = std::exp(c.aLog[0]) * (c.f[i] + c.dtBias[i]);
    const double alpha = std::exp(-5.0 / (1.0 + std::exp(-x)));
    EXPECT_GT(alpha, std::exp(-5.0));
    EXPECT_LT(alpha, 1.0);
    for (int64_t j = 0; j < 2; ++j) {
      EXPECT_NEAR(state[i * 2 + j], alpha * before[i * 2 + j], 1e-6);
    }
  }
}

TEST(KdaRef, ChunksWithCarriedStateEqualOneCall) {
  const KdaCase c = randomCase(35, 15, 2, 8, 4);
  std::vector<float> whole(c.heads * c.dk * c.dv, 0.0f);
  const std::vector<float> once = run(c, whole, 0, c.tokens);
  std::vector<float> state(whole.size(), 0.0f);
  std::vector<float> chunked;
  for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}, {5, 15}}) {
    const std::vector<float> part = run(c, state, t0, t1);
    chunked.insert(chunked.end(), part.begin(), part.end());
  }
  EXPECT_EQ(chunked, once);
  EXPECT_EQ(state, whole);
}

} // namespace
} // namespace glm::kernels
