// Tests of NoPE MLA over a selected token set: the absorbed reference against the expanded
// formula (K, V per head from kv_b, dqk ≠ dv), set semantics, causality, chunked appends, and kv_b
// read in Q4 groups and fp8 blocks (kernels/common/DenseFormats.h).
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

/// Random valid bytes of kv_b [rows, cols] in `encoding`: Q4 codes of any nibble with finite f16
/// (scale, minimum) pairs, fp8 values of any finite code with positive f32 scaleInv.
std::vector<uint8_t> randomEncoded(SplitMix64 &rng, DenseEncoding encoding, int64_t rows,
                                   int64_t cols) {
  std::vector<uint8_t> bytes;
  if (encoding == DenseEncoding::Q4) {
    bytes.assign(static_cast<size_t>(q4Bytes(1, rows, cols)), 0);
    for (int64_t i = 0; i < rows * cols / 2; ++i) {
      bytes[i] = static_cast<uint8_t>(rng.below(256));
    }
    uint8_t *groups = bytes.data() + q4GroupsOffset(1, rows, cols);
    for (int64_t g = 0; g < rows * (cols / kQ4Group); ++g) {
      const double scale = 0.05 * rng.normal();
      const uint16_t pair[2] = {doubleToF16(scale),
                                doubleToF16(-7.5 * scale + 0.05 * rng.normal())};
      std::memcpy(groups + 4 * g, pair, 4);
    }
  } else {
    bytes.assign(static_cast<size_t>(fp8Bytes(1, rows, cols)), 0);
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint8_t v;
      do {
        v = static_cast<uint8_t>(rng.below(256));
      } while ((v & 0x7Fu) == 0x7Fu); // not NaN
      bytes[i] = v;
    }
    uint8_t *scales = bytes.data() + fp8ScalesOffset(1, rows, cols);
    for (int64_t b = 0; b < fp8BlocksOf(rows) * fp8BlocksOf(cols); ++b) {
      const float scaleInv =
          std::ldexp(1.0f + static_cast<float>(rng.uniform()), -8 - static_cast<int>(rng.below(4)));
      std::memcpy(scales + 4 * b, &scaleInv, 4);
    }
  }
  return bytes;
}

/// The reference over a kv_b in Q4 groups or fp8 blocks equals the reference over that kv_b
/// dequantized to f32, element for element: the encoded view widens every weight to the same f32.
void expectEncodedEqualsDequantized(DenseEncoding encoding, uint64_t seed) {
  constexpr int64_t heads = 2, dqk = 6, dv = 5, rank = 128 + 64, tokens = 9, width = 5;
  const int64_t rows = heads * (dqk + dv);
  SplitMix64 rng(seed);
  const std::vector<float> q = randomFloats(rng, tokens * heads * dqk);
  const std::vector<float> latent = randomFloats(rng, tokens * rank);
  std::vector<int32_t> selected(tokens * width);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < width; ++s) {
      selected[t * width + s] = rng.below(6) == 0 ? -1 : static_cast<int32_t>(rng.below(t + 1));
    }
  }
  const std::vector<uint8_t> bytes = randomEncoded(rng, encoding, rows, rank);
  const WeightView encoded = WeightView::encoded(bytes.data(), encoding, DType::F32, rows, rank);
  std::vector<float> dequantized(rows * rank);
  encoded.loadAll(dequantized.data());
  for (float v : dequantized) {
    ASSERT_TRUE(std::isfinite(v));
  }
  auto attend = [&](const WeightView &kvB) {
    std::vector<float> cacheRows(tokens * rank), out(tokens * heads * dv, -7.0f);
    MlaLatentCache cache{cacheRows.data(), tokens, 0};
    const Status s = mlaSparseAttentionRef({.q = q.data(),
                                            .latent = latent.data(),
                                            .kvB = kvB,
                                            .selected = selected.data(),
                                            .cache = &cache,
                                            .out = out.data(),
                                            .tokens = tokens,
                                            .heads = heads,
                                            .qkHeadDim = dqk,
                                            .vHeadDim = dv,
                                            .kvLoraRank = rank,
                                            .selectedWidth = width,
                                            .scale = 1.0f / std::sqrt(float(dqk))});
    EXPECT_TRUE(s.ok()) << s.toString();
    return out;
  };
  const std::vector<float> got = attend(encoded);
  const std::vector<float> want = attend(WeightView::f32(dequantized.data(), {rows, rank}));
  EXPECT_EQ(got, want);
  double norm = 0.0;
  for (float v : want) {
    norm += std::abs(v);
  }
  EXPECT_GT(norm, 0.0) << "a case that attends to something";
}

TEST(MlaSparseAttentionRef, Q4KvBEqualsItsDequantizedF32) {
  expectEncodedEqualsDequantized(DenseEncoding::Q4, 55);
}

TEST(MlaSparseAttentionRef, Fp8KvBEqualsItsDequantizedF32) {
  expectEncodedEqualsDequantized(DenseEncoding::Fp8, 56);
}

} // namespace
} // namespace glm::kernels
