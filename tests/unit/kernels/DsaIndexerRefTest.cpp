// Tests of the KPool lightning indexer: pooled keys and scores against the formula, candidate and
// tail rules at pool boundaries, ties, and chunked calls continuing from the cache.
#include "kernels/dsa_indexer/dsa_indexer.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace glm::kernels {
namespace {

struct IndexerCase {
  int64_t tokens, heads, d, topk, kpool;
  bool tail = true;
  std::vector<float> q, k, gate, w, ape;
};

IndexerCase randomCase(uint64_t seed, int64_t tokens, int64_t heads, int64_t d, int64_t topk,
                       int64_t kpool) {
  SplitMix64 rng(seed);
  IndexerCase c{tokens, heads, d, topk, kpool};
  c.q = randomFloats(rng, tokens * heads * d);
  c.k = randomFloats(rng, tokens * d);
  c.gate = randomFloats(rng, tokens * d);
  c.w = randomFloats(rng, tokens * heads);
  c.ape = randomFloats(rng, kpool * d, 0.5f);
  return c;
}

/// An indexer cache with its own storage.
struct OwnedCache {
  OwnedCache(int64_t pools, int64_t kpool, int64_t d)
      : poolKeys(std::max<int64_t>(pools, 1) * d), open(kpool * d), gates(kpool * d) {
    cache.poolKeys = poolKeys.data();
    cache.maxPools = pools;
    cache.openKeys = open.data();
    cache.openGates = gates.data();
  }
  std::vector<float> poolKeys, open, gates;
  DsaIndexerCache cache;
};

struct IndexerOut {
  std::vector<int32_t> selected;
  std::vector<float> scores; // [tokens, stride]
  int64_t stride = 0;
};

/// Runs tokens [t0, t1) with the given cache.
IndexerOut run(const IndexerCase &c, DsaIndexerCache &cache, int64_t t0, int64_t t1,
               TopkTieRule rule = TopkTieRule::LowerIndex) {
  const int64_t n = t1 - t0;
  IndexerOut o;
  o.stride = std::max<int64_t>(c.tokens / c.kpool, 1);
  o.selected.assign(n * dsaIndexerWidth(c.topk, c.kpool, c.tail), -7);
  o.scores.assign(n * o.stride, 0.0f);
  const Status s = dsaIndexerRef({.q = c.q.data() + t0 * c.heads * c.d,
                                  .k = c.k.data() + t0 * c.d,
                                  .gate = c.gate.data() + t0 * c.d,
                                  .headWeights = c.w.data() + t0 * c.heads,
                                  .ape = WeightView::f32(c.ape.data(), {c.kpool, c.d}),
                                  .cache = &cache,
                                  .selected = o.selected.data(),
                                  .poolScores = o.scores.data(),
                                  .poolScoresStride = o.stride,
                                  .tokens = n,
                                  .heads = c.heads,
                                  .headDim = c.d,
                                  .topk = c.topk,
                                  .kpool = c.kpool,
                                  .alwaysSelectTail = c.tail,
                                  .tieRule = rule});
  EXPECT_TRUE(s.ok()) << s.toString();
  return o;
}

/// I[p] for query t, straight from the formula in dsa_indexer.h.
double naiveScore(const IndexerCase &c, int64_t t, int64_t p) {
  std::vector<double> kp(c.d);
  for (int64_t ch = 0; ch < c.d; ++ch) {
    double num = 0.0, den = 0.0;
    for (int64_t r = 0; r < c.kpool; ++r) {
      const int64_t tok = p * c.kpool + r;
      const double e = std::exp(double(c.gate[tok * c.d + ch]) + c.ape[r * c.d + ch]);
      num += e * c.k[tok * c.d + ch];
      den += e;
    }
    kp[ch] = num / den;
  }
  double score = 0.0;
  for (int64_t h = 0; h < c.heads; ++h) {
    double dot = 0.0;
    for (int64_t ch = 0; ch < c.d; ++ch) {
      dot += c.q[(t * c.heads + h) * c.d + ch] * kp[ch];
    }
    score += c.w[t * c.heads + h] / std::sqrt(double(c.heads)) *
             std::max(0.0, dot / std::sqrt(double(c.d)));
  }
  return score;
}

TEST(DsaIndexerRef, ScoresPoolsAndAppliesTheCandidateAndTailRules) {
  // kpool 4, topk 8 (2 pools), 27 tokens: 6 closed pools, the 7th open.
  const IndexerCase c = randomCase(41, 27, 3, 8, 8, 4);
  OwnedCache owned(c.tokens / c.kpool, c.kpool, c.d);
  const IndexerOut o = run(c, owned.cache, 0, c.tokens);
  EXPECT_EQ(owned.cache.length, c.tokens);
  const int64_t width = dsaIndexerWidth(c.topk, c.kpool, true);
  ASSERT_EQ(width, 11);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int32_t *row = &o.selected[t * width];
    const int64_t candidates = (t + 1) / c.kpool;
    // Scores: the formula for candidates, −inf for pools whose last token is after t.
    std::vector<double> want(candidates);
    for (int64_t p = 0; p < o.stride; ++p) {
      if (p < candidates) {
        want[p] = naiveScore(c, t, p);
        EXPECT_NEAR(o.scores[t * o.stride + p], want[p], 1e-5) << "t " << t << " pool " << p;
      } else {
        EXPECT_EQ(o.scores[t * o.stride + p], -INFINITY) << "t " << t << " pool " << p;
      }
    }
    // Chosen pools: min(2, candidates) of them, the best-scoring, each a whole causal pool.
    const int64_t chosen = std::min<int64_t>(2, candidates);
    std::set<int64_t> pools;
    for (int64_t s = 0; s < c.topk; ++s) {
      if (s >= chosen * c.kpool) {
        EXPECT_EQ(row[s], -1) << "t " << t << " slot " << s;
        continue;
      }
      EXPECT_EQ(row[s] % c.kpool, s % c.kpool);
      EXPECT_LE(row[s] / c.kpool * c.kpool + c.kpool - 1, t) << "pool not complete at t " << t;
      pools.insert(row[s] / c.kpool);
    }
    EXPECT_EQ(static_cast<int64_t>(pools.size()), chosen) << "t " << t;
    for (int64_t p = 0; p < candidates; ++p) {
      if (!pools.count(p)) {
        for (int64_t kept : pools) {
          EXPECT_GE(want[kept], want[p]) << "t " << t;
        }
      }
    }
    // Tail: 4⌊(t+1)/4⌋ .. t, the open pool's tokens; empty when t closes a pool.
    const int64_t tailStart = (t + 1) / c.kpool * c.kpool;
    for (int64_t j = 0; j < c.kpool - 1; ++j) {
      const int64_t pos = tailStart + j;
      EXPECT_EQ(row[c.topk + j], pos <= t ? pos : -1) << "t " << t << " tail slot " << j;
    }
  }
  // Boundaries: t = 2 sees only its tail; t = 3 closes pool 0 and selects it with no tail.
  EXPECT_EQ(std::vector<int32_t>(&o.selected[2 * width], &o.selected[3 * width]),
            (std::vector<int32_t>{-1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(&o.selected[3 * width], &o.selected[4 * width]),
            (std::vector<int32_t>{0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1}));
}

TEST(DsaIndexerRef, ChosenPoolsComeInDescendingScoreOrder) {
  const IndexerCase c = randomCase(42, 40, 2, 4, 12, 4);
  OwnedCache owned(10, 4, 4);
  const IndexerOut o = run(c, owned.cache, 0, c.tokens);
  const int64_t width = dsaIndexerWidth(12, 4, true);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t s = 1; s < 3; ++s) {
      const int32_t prev = o.selected[t * width + (s - 1) * 4];
      const int32_t cur = o.selected[t * width + s * 4];
      if (cur >= 0) {
        EXPECT_GE(o.scores[t * o.stride + prev / 4], o.scores[t * o.stride + cur / 4]);
      }
    }
  }
}

TEST(DsaIndexerRef, ChunkedCallsContinueFromTheCache) {
  const IndexerCase c = randomCase(43, 37, 2, 8, 8, 4);
  OwnedCache once(9, 4, 8);
  const IndexerOut whole = run(c, once.cache, 0, c.tokens);
  // Chunk ends inside pools, on pool boundaries, and single tokens (decode).
  OwnedCache chunked(9, 4, 8);
  std::vector<int32_t> selected;
  std::vector<float> scores;
  int64_t start = 0;
  for (int64_t end : {1, 6, 8, 13, 14, 15, 16, 30, 37}) {
    const IndexerOut part = run(c, chunked.cache, start, end);
    selected.insert(selected.end(), part.selected.begin(), part.selected.end());
    scores.insert(scores.end(), part.scores.begin(), part.scores.end());
    start = end;
  }
  EXPECT_EQ(selected, whole.selected);
  EXPECT_EQ(scores, whole.scores);
  EXPECT_EQ(chunked.poolKeys, once.poolKeys);
  EXPECT_EQ(chunked.cache.length, 37);
}

TEST(DsaIndexerRef, TiedScoresGoToTheLowerPool) {
  // A zero query scores every pool 0: the lower-index rule keeps pools 0 and 1.
  IndexerCase c = randomCase(44, 24, 2, 4, 8, 4);
  std::fill(c.q.begin(), c.q.end(), 0.0f);
  OwnedCache owned(6, 4, 4);
  const IndexerOut o = run(c, owned.cache, 0, c.tokens);
  const int64_t width = dsaIndexerWidth(8, 4, true);
  const int32_t *last = &o.selected[23 * width];
  EXPECT_EQ(std::vector<int32_t>(last, last + 8), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // TorchCpu picks some two of the six tied pools: still two whole causal pools.
  OwnedCache owned2(6, 4, 4);
  const IndexerOut torch = run(c, owned2.cache, 0, c.tokens, TopkTieRule::TorchCpu);
  std::set<int32_t> pools;
  for (int64_t s = 0; s < 8; ++s) {
    ASSERT_GE(torch.selected[23 * width + s], 0);
    pools.insert(torch.selected[23 * width + s] / 4);
  }
  EXPECT_EQ(pools.size(), 2u);
}

TEST(DsaIndexerRef, WithoutTheTailRowsHoldOnlyPools) {
  IndexerCase c = randomCase(45, 10, 1, 4, 8, 4);
  c.tail = false;
  OwnedCache owned(2, 4, 4);
  const IndexerOut o = run(c, owned.cache, 0, c.tokens);
  ASSERT_EQ(dsaIndexerWidth(8, 4, false), 8);
  EXPECT_EQ(std::vector<int32_t>(&o.selected[2 * 8], &o.selected[3 * 8]),
            std::vector<int32_t>(8, -1));
}

TEST(DsaIndexerRef, RefusesToOverflowTheCache) {
  const IndexerCase c = randomCase(46, 12, 1, 4, 8, 4);
  OwnedCache owned(2, 4, 4); // room for 2 pools; 12 tokens close 3
  std::vector<int32_t> selected(12 * 11);
  const Status s = dsaIndexerRef({.q = c.q.data(),
                                  .k = c.k.data(),
                                  .gate = c.gate.data(),
                                  .headWeights = c.w.data(),
                                  .ape = WeightView::f32(c.ape.data(), {4, 4}),
                                  .cache = &owned.cache,
                                  .selected = selected.data(),
                                  .tokens = 12,
                                  .heads = 1,
                                  .headDim = 4,
                                  .topk = 8,
                                  .kpool = 4});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(owned.cache.length, 0) << "a refused call must not append";
}

} // namespace
} // namespace glm::kernels
