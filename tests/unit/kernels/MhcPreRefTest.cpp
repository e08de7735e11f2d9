// Tests of the mHC mixer: the §2.3 formula written out, and Sinkhorn's doubly stochastic result.
#include "kernels/mhc_pre/mhc_pre.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

namespace glm::kernels {
namespace {

struct MhcCase {
  int64_t tokens, hc, hidden, iters;
  std::vector<float> streams, fn, base, scale;
};

MhcCase randomCase(uint64_t seed, int64_t tokens, int64_t hc, int64_t hidden, int64_t iters,
                   float fnScale = 0.3f) {
  SplitMix64 rng(seed);
  MhcCase c{tokens, hc, hidden, iters};
  c.streams = randomFloats(rng, tokens * hc * hidden);
  c.fn = randomFloats(rng, (2 + hc) * hc * hc * hidden, fnScale);
  c.base = randomFloats(rng, (2 + hc) * hc, 0.5f);
  c.scale = {0.7f, 1.3f, 1.1f};
  return c;
}

struct MhcOut {
  std::vector<float> pre, post, comb, x;
};

MhcOut runPre(const MhcCase &c) {
  MhcOut o;
  o.pre.resize(c.tokens * c.hc);
  o.post.resize(c.tokens * c.hc);
  o.comb.resize(c.tokens * c.hc * c.hc);
  o.x.resize(c.tokens * c.hidden);
  const int64_t mix = (2 + c.hc) * c.hc;
  EXPECT_TRUE(mhcPreRef({.streams = c.streams.data(),
                         .fn = WeightView::f32(c.fn.data(), {mix, c.hc * c.hidden}),
                         .base = WeightView::f32(c.base.data(), {mix}),
                         .scale = WeightView::f32(c.scale.data(), {3}),
                         .pre = o.pre.data(),
                         .post = o.post.data(),
                         .comb = o.comb.data(),
                         .x = o.x.data(),
                         .tokens = c.tokens,
                         .hcMult = c.hc,
                         .hidden = c.hidden,
                         .sinkhornIters = c.iters,
                         .normEps = 1e-5f,
                         .hcEps = 1e-6f})
                  .ok());
  return o;
}

/// glm53_arch.md §2.3 written out with plain float loops.
MhcOut naivePre(const MhcCase &c) {
  const int64_t hc = c.hc, width = c.hc * c.hidden, mix = (2 + hc) * hc;
  const float eps = 1e-6f;
  MhcOut o;
  for (int64_t t = 0; t < c.tokens; ++t) {
    const float *s = &c.streams[t * width];
    float ms = 0.0f;
    for (int64_t i = 0; i < width; ++i) {
      ms += s[i] * s[i];
    }
    const float inv = 1.0f / std::sqrt(ms / width + 1e-5f);
    std::vector<float> m(mix, 0.0f);
    for (int64_t k = 0; k < mix; ++k) {
      for (int64_t i = 0; i < width; ++i) {
        m[k] += c.fn[k * width + i] * s[i] * inv;
      }
    }
    auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
    std::vector<float> pre(hc);
    for (int64_t j = 0; j < hc; ++j) {
      pre[j] = sig(m[j] * c.scale[0] + c.base[j]) + eps;
      o.pre.push_back(pre[j]);
      o.post.push_back(2.0f * sig(m[hc + j] * c.scale[1] + c.base[hc + j]));
    }
    std::vector<std::vector<float>> C(hc, std::vector<float>(hc));
    for (int64_t i = 0; i < hc; ++i) {
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) {
        C[i][j] = std::exp(m[2 * hc + i * hc + j] * c.scale[2] + c.base[2 * hc + i * hc + j]);
        sum += C[i][j];
      }
      for (int64_t j = 0; j < hc; ++j) {
        C[i][j] = C[i][j] / sum + eps;
      }
    }
    auto cols = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < hc; ++i) {
          sum += C[i][j];
        }
        for (int64_t i = 0; i < hc; ++i) {
          C[i][j] /= sum + eps;
        }
      }
    };
    cols();
    for (int64_t it = 1; it < c.iters; ++it) {
      for (int64_t i = 0; i < hc; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) {
          sum += C[i][j];
        }
        for (int64_t j = 0; j < hc; ++j) {
          C[i][j] /= sum + eps;
        }
      }
      cols();
    }
    for (int64_t i = 0; i < hc; ++i) {
      for (int64_t j = 0; j < hc; ++j) {
        o.comb.push_back(C[i][j]);
      }
    }
    for (int64_t d = 0; d < c.hidden; ++d) {
      float x = 0.0f;
      for (int64_t j = 0; j < hc; ++j) {
        x += pre[j] * s[j * c.hidden + d];
      }
      o.x.push_back(x);
    }
  }
  return o;
}

TEST(MhcPreRef, MatchesTheSpecWrittenOut) {
  for (const MhcCase &c :
       {randomCase(11, 3, 4, 8, 20), randomCase(12, 2, 2, 5, 3), randomCase(13, 1, 3, 4, 1)}) {
    const MhcOut got = runPre(c);
    const MhcOut want = naivePre(c);
    EXPECT_LE(maxRelativeError(got.pre, want.pre), 1e-5) << "hc " << c.hc;
    EXPECT_LE(maxRelativeError(got.post, want.post), 1e-5) << "hc " << c.hc;
    EXPECT_LE(maxRelativeError(got.comb, want.comb), 1e-5) << "hc " << c.hc;
    EXPECT_LE(maxRelativeError(got.x, want.x), 1e-5) << "hc " << c.hc;
  }
}

TEST(MhcPreRef, SinkhornMakesTheMixerDoublyStochastic) {
  // The last pass normalises columns, so they sum to 1 (less the eps terms) after any number of
  // iterations; rows converge as iterations grow, slower the more peaked the softmax start is:
  // mixing logits of fixture size (fn ~ 0.05) after the release's 20 iterations, and strongly
  // peaked ones (fn ~ 0.3) after 200.
  for (const MhcCase &c : {randomCase(14, 5, 4, 16, 20, 0.05f), randomCase(15, 5, 4, 16, 200)}) {
    const MhcOut o = runPre(c);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t k = 0; k < c.hc; ++k) {
        double row = 0.0, col = 0.0;
        for (int64_t m = 0; m < c.hc; ++m) {
          row += o.comb[(t * c.hc + k) * c.hc + m];
          col += o.comb[(t * c.hc + m) * c.hc + k];
          EXPECT_GT(o.comb[(t * c.hc + k) * c.hc + m], 0.0f);
        }
        EXPECT_NEAR(col, 1.0, 1e-5) << "token " << t << " column " << k;
        EXPECT_NEAR(row, 1.0, 1e-5) << "iters " << c.iters << " token " << t << " row " << k;
      }
      for (int64_t k = 0; k < c.hc; ++k) {
        EXPECT_GT(o.pre[t * c.hc + k], 0.0f);
        EXPECT_LT(o.pre[t * c.hc + k], 1.0f + 1e-5f);
        EXPECT_GT(o.post[t * c.hc + k], 0.0f);
        EXPECT_LT(o.post[t * c.hc + k], 2.0f);
      }
    }
  }
}

} // namespace
} // namespace glm::kernels
