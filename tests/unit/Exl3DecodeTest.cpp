// EXL3 decode against reference/exl3_format.md: the codebook and trellis test vectors (§3.4, §9)
// bit for bit, the bitstream rules for every K, the tile order, the Hadamard, reconstruction
// against its definition, the linear and MoE references, and the checkpoint reader's checks.
#include "base/Hmac.h"
#include "base/Random.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/exl3/exl3.h"
#include "kernels/linear/linear.h"
#include "kernels/moe_experts/moe_experts.h"
#include "models/glm53/Config.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/KernelViews.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensors.h"
#include "runtime/weights/SafeTensorsWriter.h"
#include "tools/synth/Synth.h"

#include "tests/unit/support/Compare.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace glm::kernels {
namespace {

using glm::testing::relativeL2;

constexpr std::array<Exl3Codebook, 3> kCodebooks = {Exl3Codebook::Inst3, Exl3Codebook::Mcg,
                                                    Exl3Codebook::Mul1};

/// SHA-256 in hex (base/Hmac.h's, tested there against FIPS vectors), for the spec's digests of
/// whole codebook tables.
std::string sha256(const std::vector<uint8_t> &message) {
  const Sha256Digest digest = Sha256().add(message.data(), message.size()).finish();
  return hexOf(digest.data(), digest.size());
}

TEST(Exl3Decode, Sha256OfKnownMessage) {
  // FIPS 180-4's "abc" example, so the codebook digests below test the codebooks.
  EXPECT_EQ(sha256({'a', 'b', 'c'}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Exl3Decode, CodebookTestVectors) {
  // §3.4: states 0..7 and 0xFFFF, and the SHA-256 of the whole table (little-endian u16).
  struct Vector {
    Exl3Codebook codebook;
    std::array<uint16_t, 8> first;
    uint16_t last;
    const char *sha;
  };
  const Vector vectors[] = {
      {Exl3Codebook::Inst3,
       {0x3a25, 0xbb5b, 0x3b74, 0x34b6, 0x3924, 0x2cb0, 0x404f, 0xb906},
       0xb110,
       "ad88de2dcff5bb05fff2faec37cceceb43aa1c2e8203f9d81a6fbd6dd3393eea"},
      {Exl3Codebook::Mcg,
       {0x3f60, 0x304e, 0xba13, 0x3ab8, 0x3952, 0xb75f, 0xbea4, 0xbc71},
       0x3acd,
       "95383563929baa9d1ae5de0be22490284382673620bdd85929feea7bdbef04a9"},
      {Exl3Codebook::Mul1,
       {0xc2e8, 0x3921, 0xb72d, 0x3239, 0xbb29, 0xb409, 0xbd5e, 0xb997},
       0xb936,
       "bc48d02cb1c14939dc47b90f870dd689d63e3b1ab69a157e65538db68677a6c8"},
  };
  for (const Vector &v : vectors) {
    SCOPED_TRACE(std::string(exl3CodebookName(v.codebook)));
    for (uint32_t s = 0; s < 8; ++s) {
      EXPECT_EQ(exl3CodebookHalf(v.codebook, s), v.first[s]) << "state " << s;
    }
    EXPECT_EQ(exl3CodebookHalf(v.codebook, 0xFFFF), v.last);
    std::vector<uint8_t> table;
    for (uint32_t s = 0; s < 65536; ++s) {
      const uint16_t h = exl3CodebookHalf(v.codebook, s);
      table.push_back(static_cast<uint8_t>(h & 0xFF));
      table.push_back(static_cast<uint8_t>(h >> 8));
      // The float table is the same values.
      ASSERT_EQ(std::bit_cast<uint32_t>(exl3CodebookValue(v.codebook, s)),
                std::bit_cast<uint32_t>(f16ToFloat(h)));
    }
    EXPECT_EQ(sha256(table), v.sha);
  }
}

TEST(Exl3Decode, CodebookStatistics) {
  // §3.3: the RMS the encoder's scaling assumes (1.2437 for 3INST, about 1 for MUL1).
  const double expected[] = {1.243711, 1.244112, 1.000310};
  for (size_t c = 0; c < kCodebooks.size(); ++c) {
    double sum = 0, squares = 0;
    for (uint32_t s = 0; s < 65536; ++s) {
      const double v = exl3CodebookValue(kCodebooks[c], s);
      sum += v;
      squares += v * v;
    }
    const double mean = sum / 65536, rms = std::sqrt(squares / 65536 - mean * mean);
    EXPECT_NEAR(rms, expected[c], 5e-7) << exl3CodebookName(kCodebooks[c]);
  }
}

TEST(Exl3Decode, TrellisTestVectors) {
  // §9: idx[t] = ((t · 2654435761 mod 2^32) >> 13) mod 2^K, packed per §2.4.
  struct Vector {
    int bits;
    std::array<uint16_t, 8> trellis, states;
    uint16_t last;
    std::array<std::array<uint16_t, 8>, 3> values; // 3INST, MCG, MUL1
  };
  const Vector vectors[] = {
      {2,
       {0xa955, 0x3ffa, 0xfaa9, 0x003f, 0x3ffa, 0x5500, 0x003f, 0xa955},
       {0xaa94, 0xaa53, 0xa94f, 0xa53f, 0x94ff, 0x53ff, 0x4ffe, 0x3ffa},
       0xeaa5,
       {{{0x3e70, 0x3c2a, 0x3c7a, 0x3ee3, 0x35f2, 0x3ccb, 0x3f0a, 0x3436},
         {0xb8de, 0x3cca, 0x366c, 0xb148, 0xaf58, 0xc06f, 0xb214, 0xac00},
         {0x3755, 0x34f4, 0xb45c, 0xbb00, 0x30ec, 0x4124, 0x3cd0, 0xba91}}}},
      {3,
       {0xf2cb, 0x0fbe, 0x8209, 0x1a69, 0x6595, 0xdf7d, 0x040f, 0x34d1},
       {0x6548, 0x2a43, 0x521f, 0x90fb, 0x87df, 0x3efb, 0xf7de, 0xbef2},
       0x2ca9,
       {{{0x3edd, 0xc0c0, 0xbe80, 0x3d2f, 0xb8d0, 0xbe5d, 0x3b58, 0xbef9},
         {0x3b93, 0x3452, 0xbeaf, 0xbbf8, 0x3037, 0x337c, 0xb7ef, 0x4026},
         {0x3046, 0xb6be, 0x3c61, 0xbd9c, 0x3239, 0x2ca6, 0xba30, 0x359a}}}},
      {4,
       {0xfb62, 0x0b73, 0xd951, 0xea61, 0xc73f, 0xc840, 0xa62d, 0xb72e},
       {0xa510, 0x510b, 0x10b7, 0x0b73, 0xb73f, 0x73fb, 0x3fb6, 0xfb62},
       0xea51,
       {{{0xb793, 0xb458, 0x3953, 0x2480, 0xb785, 0xc2e5, 0xbc28, 0xc0ee},
         {0xb6ca, 0x3ef3, 0xb762, 0xbf80, 0x3ddd, 0x2b60, 0x3f09, 0xbd64},
         {0x3046, 0x3913, 0xbb00, 0x28f7, 0xb21f, 0xbc49, 0x3888, 0x2ab2}}}},
      {8,
       {0x7733, 0x00bb, 0x6622, 0xefab, 0x5611, 0xde9a, 0x4501, 0xcd89},
       {0x1100, 0x00bb, 0xbb77, 0x7733, 0x33ef, 0xefab, 0xab66, 0x6622},
       0x5511,
       {{{0xad34, 0xb7d4, 0x3bac, 0xa8f0, 0x3eee, 0xc003, 0x37a8, 0x3d58},
         {0xab10, 0xba37, 0xbc64, 0xc0cc, 0x40ed, 0xbed9, 0x3d30, 0xbbfa},
         {0x3b83, 0x37fc, 0x2ed0, 0x3cd0, 0xbda3, 0xb53a, 0x300e, 0x3de5}}}},
  };
  for (const Vector &v : vectors) {
    SCOPED_TRACE("K=" + std::to_string(v.bits));
    uint16_t indices[kExl3TileValues], tile[128], states[kExl3TileValues];
    for (uint32_t t = 0; t < kExl3TileValues; ++t) {
      indices[t] = static_cast<uint16_t>(((t * 2654435761u) >> 13) & ((1u << v.bits) - 1));
    }
    // The packer keeps only the low K bits, so the indices alone are a valid input.
    exl3PackTile(indices, v.bits, tile);
    exl3TileStates(tile, v.bits, states);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(tile[i], v.trellis[i]) << "trellis[" << i << "]";
      EXPECT_EQ(states[i], v.states[i]) << "state[" << i << "]";
      for (size_t c = 0; c < kCodebooks.size(); ++c) {
        EXPECT_EQ(exl3CodebookHalf(kCodebooks[c], states[i]), v.values[c][i])
            << exl3CodebookName(kCodebooks[c]) << " value " << i;
      }
    }
    EXPECT_EQ(states[255], v.last);
    EXPECT_TRUE(exl3StatesChain(states, v.bits));
  }
}

TEST(Exl3Decode, BitstreamRulesForEveryK) {
  // §2.2-2.4 for K = 1..8 on random tiles: the window decoder, the chained decoder and the packer
  // agree, every decoded sequence chains, and packing it gives the tile back bit for bit.
  SplitMix64 rng(11);
  for (int bits = kExl3MinBits; bits <= kExl3MaxBits; ++bits) {
    SCOPED_TRACE("K=" + std::to_string(bits));
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<uint16_t> tile(static_cast<size_t>(16 * bits)), again(tile.size());
      for (uint16_t &u : tile) {
        u = static_cast<uint16_t>(rng.next());
      }
      uint16_t states[kExl3TileValues];
      exl3TileStates(tile.data(), bits, states);
      ASSERT_TRUE(exl3StatesChain(states, bits));
      for (int p = 0; p < kExl3TileValues; ++p) {
        ASSERT_EQ(exl3State(tile.data(), bits, p), states[p]) << "position " << p;
        // The newest index is the low K bits of its state (§2.3): bits [pK, pK + K).
        uint32_t index = 0;
        for (int b = 0; b < bits; ++b) {
          const int bit = p * bits + b;
          const uint32_t word = tile[2 * (bit / 32)] | (uint32_t(tile[2 * (bit / 32) + 1]) << 16);
          index = (index << 1) | ((word >> (31 - bit % 32)) & 1u);
        }
        ASSERT_EQ(states[p] & ((1u << bits) - 1), index) << "position " << p;
      }
      exl3PackTile(states, bits, again.data());
      ASSERT_EQ(again, tile);
    }
    // A broken chain is detected.
    uint16_t states[kExl3TileValues];
    std::vector<uint16_t> tile(static_cast<size_t>(16 * bits), 0x5A5A);
    exl3TileStates(tile.data(), bits, states);
    states[100] ^= 0x8000;
    EXPECT_FALSE(exl3StatesChain(states, bits));
  }
}

TEST(Exl3Decode, TilePermutation) {
  // §5.1: the first positions as row-major indices, and a bijection onto the 16 x 16 tile.
  const int first[] = {0, 16, 128, 144, 8, 24, 136, 152, 32, 48};
  for (int p = 0; p < 10; ++p) {
    EXPECT_EQ(exl3TileRow(p) * 16 + exl3TileCol(p), first[p]) << "position " << p;
  }
  std::vector<int> seen(256, 0);
  for (int p = 0; p < kExl3TileValues; ++p) {
    ++seen[exl3TileRow(p) * 16 + exl3TileCol(p)];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 256);
}

TEST(Exl3Decode, HadamardIsTheNormalisedSylvesterMatrix) {
  // §4.1: H[i][j] = (-1)^popcount(i & j) / sqrt(128), per 128-block, and its own inverse.
  for (int i = 0; i < 128; ++i) {
    std::vector<double> x(256, 0.0);
    x[128 + i] = 1.0; // the second block: blocks are independent
    exl3Hadamard(x.data(), 256);
    for (int j = 0; j < 128; ++j) {
      ASSERT_EQ(x[j], 0.0);
      const double h = (std::popcount(unsigned(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(128.0);
      ASSERT_NEAR(x[128 + j], h, 1e-15) << i << ", " << j;
    }
  }
  SplitMix64 rng(3);
  std::vector<float> v(384), w;
  for (float &f : v) {
    f = rng.normal();
  }
  w = v;
  exl3Hadamard(w.data(), 384);
  exl3Hadamard(w.data(), 384);
  EXPECT_LE(relativeL2(w.data(), v.data(), 384), 1e-6);
}

/// A random EXL3 matrix: random trellis bits and scales, possibly with padding.
struct RandomMatrix {
  std::vector<uint16_t> trellis, suh, svh, bias;
  Exl3MatrixView view;

  RandomMatrix(int64_t out, int64_t in, int bits, Exl3Codebook codebook, uint64_t seed,
               bool withBias = false) {
    SplitMix64 rng(seed);
    const int64_t k = exl3Padded(in), n = exl3Padded(out);
    trellis.resize(static_cast<size_t>(k * n * bits / 16));
    for (uint16_t &u : trellis) {
      u = static_cast<uint16_t>(rng.next());
    }
    for (int64_t i = 0; i < k; ++i) {
      suh.push_back(doubleToF16((rng.chance(50) ? -1 : 1) * (0.01 + 0.02 * rng.uniform())));
    }
    for (int64_t j = 0; j < n; ++j) {
      svh.push_back(doubleToF16((rng.chance(50) ? -1 : 1) * (0.5 + rng.uniform())));
      bias.push_back(doubleToF16(0.1 * rng.normal()));
    }
    view = {.trellis = trellis.data(),
            .suh = suh.data(),
            .svh = svh.data(),
            .bias = withBias ? bias.data() : nullptr,
            .bits = bits,
            .codebook = codebook,
            .in = in,
            .out = out};
  }
};

/// diag(suh) · Hk · Ŵ · Hn · diag(svh) by explicit matrix products, [out][in], in double.
std::vector<double> definitionOfW(const Exl3MatrixView &m) {
  const int64_t k = m.k(), n = m.n();
  std::vector<float> wHat(static_cast<size_t>(k * n));
  EXPECT_TRUE(exl3DecodeRotatedRef(m, wHat.data()).ok());
  auto h = [](int64_t i, int64_t j) {
    if (i / 128 != j / 128) {
      return 0.0;
    }
    return (std::popcount(uint64_t(i % 128) & uint64_t(j % 128)) % 2 ? -1.0 : 1.0) /
           std::sqrt(128.0);
  };
  std::vector<double> right(static_cast<size_t>(k * n), 0.0); // Ŵ · Hn
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 128 * (j / 128); l < 128 * (j / 128 + 1); ++l) {
        s += wHat[i * n + l] * h(l, j);
      }
      right[i * n + j] = s;
    }
  }
  std::vector<double> w(static_cast<size_t>(m.out * m.in));
  for (int64_t i = 0; i < m.in; ++i) {
    for (int64_t j = 0; j < m.out; ++j) {
      double s = 0;
      for (int64_t l = 128 * (i / 128); l < 128 * (i / 128 + 1); ++l) {
        s += h(i, l) * right[l * n + j];
      }
      w[j * m.in + i] = f16ToFloat(m.suh[i]) * s * f16ToFloat(m.svh[j]);
    }
  }
  return w;
}

TEST(Exl3Decode, RotatedDecodePlacesTilesByThePermutation) {
  RandomMatrix r(256, 128, 3, Exl3Codebook::Mcg, 5);
  std::vector<float> wHat(128 * 256);
  ASSERT_TRUE(exl3DecodeRotatedRef(r.view, wHat.data()).ok());
  uint16_t states[kExl3TileValues];
  // Tile (kt = 5, nt = 9): offset (5 · 16 + 9) · 16K.
  exl3TileStates(r.trellis.data() + (5 * 16 + 9) * 48, 3, states);
  for (int p = 0; p < kExl3TileValues; ++p) {
    ASSERT_EQ(wHat[(80 + exl3TileRow(p)) * 256 + 144 + exl3TileCol(p)],
              exl3CodebookValue(Exl3Codebook::Mcg, states[p]));
  }
}

TEST(Exl3Decode, ReconstructionMatchesItsDefinition) {
  // Square, padded in both dimensions, and over several Hadamard blocks; every codebook.
  struct Case {
    int64_t out, in;
    int bits;
    Exl3Codebook codebook;
  };
  for (const Case &c : {Case{128, 128, 4, Exl3Codebook::Inst3}, Case{70, 100, 2, Exl3Codebook::Mcg},
                        Case{256, 200, 5, Exl3Codebook::Mul1}}) {
    SCOPED_TRACE(strCat(c.out, "x", c.in, " K=", c.bits));
    RandomMatrix r(c.out, c.in, c.bits, c.codebook, 17);
    const std::vector<double> expected = definitionOfW(r.view);
    std::vector<float> w(static_cast<size_t>(c.out * c.in));
    std::vector<uint16_t> wBf16(w.size());
    ASSERT_TRUE(exl3ReconstructRef(r.view, w.data()).ok());
    ASSERT_TRUE(exl3ReconstructBf16Ref(r.view, wBf16.data()).ok());
    for (size_t i = 0; i < w.size(); ++i) {
      // One rounding from double: fp32 within half an ulp (plus summation-order noise), bf16
      // the correctly rounded value except where a tie is that close.
      ASSERT_NEAR(w[i], expected[i], 1e-6 * std::fabs(expected[i]) + 1e-12) << i;
      ASSERT_LE(std::fabs(bf16ToFloat(wBf16[i]) - expected[i]),
                std::fabs(expected[i]) / 256.0 + 1e-12)
          << i;
    }
  }
}

TEST(Exl3Decode, LinearAppliesTheRotationsToTheActivations) {
  // y = ((x ∘ suh) Hk) Ŵ Hn ∘ svh + bias equals x · W + bias with the reconstructed W.
  RandomMatrix r(200, 300, 4, Exl3Codebook::Mcg, 23, /*withBias=*/true);
  const int64_t rows = 5;
  SplitMix64 rng(29);
  std::vector<float> x(static_cast<size_t>(rows * 300)), y(static_cast<size_t>(rows * 200)),
      dense(static_cast<size_t>(200 * 300)), expected(y.size());
  for (float &v : x) {
    v = rng.normal();
  }
  ASSERT_TRUE(exl3LinearRef({.x = x.data(), .weight = r.view, .y = y.data(), .rows = rows}).ok());
  ASSERT_TRUE(exl3ReconstructRef(r.view, dense.data()).ok());
  std::vector<float> bias(200);
  for (int64_t o = 0; o < 200; ++o) {
    bias[o] = f16ToFloat(r.bias[o]);
  }
  ASSERT_TRUE(linearRef({.x = x.data(),
                         .weight = WeightView::f32(dense.data(), {200, 300}),
                         .bias = WeightView::f32(bias.data(), {200}),
                         .y = expected.data(),
                         .rows = rows,
                         .inFeatures = 300,
                         .outFeatures = 200})
                  .ok());
  EXPECT_LE(relativeL2(y.data(), expected.data(), rows * 200), 1e-6);
}

TEST(Exl3Decode, DenseLinearIsTheBf16Reconstruction) {
  RandomMatrix r(128, 256, 3, Exl3Codebook::Mul1, 31);
  std::vector<uint16_t> bf16(128 * 256);
  ASSERT_TRUE(exl3ReconstructBf16Ref(r.view, bf16.data()).ok());
  SplitMix64 rng(37);
  std::vector<float> x(3 * 256), y(3 * 128), expected(3 * 128);
  for (float &v : x) {
    v = rng.normal();
  }
  ASSERT_TRUE(exl3DenseLinearRef(x.data(), r.view, WeightView{}, y.data(), 3).ok());
  ASSERT_TRUE(linearRef({.x = x.data(),
                         .weight = WeightView::raw(bf16.data(), DType::BF16, {128, 256}),
                         .y = expected.data(),
                         .rows = 3,
                         .inFeatures = 256,
                         .outFeatures = 128})
                  .ok());
  EXPECT_EQ(std::memcmp(y.data(), expected.data(), y.size() * 4), 0);
}

TEST(Exl3Decode, MoeExpertsEqualTheDenseReferenceOnTheBf16Reconstruction) {
  // Four experts, hidden 128, intermediate 64 (padded to 128); gate and down in EXL3, up dense.
  const int64_t experts = 4, hidden = 128, inter = 64, tokens = 6, topK = 2;
  std::vector<RandomMatrix> gates, downs;
  std::vector<std::vector<uint16_t>> gateBf16, downBf16;
  std::vector<std::vector<float>> ups;
  SplitMix64 rng(41);
  for (int64_t e = 0; e < experts; ++e) {
    gates.emplace_back(inter, hidden, 4, Exl3Codebook::Mcg, 100 + e);
    downs.emplace_back(hidden, inter, 3, Exl3Codebook::Mcg, 200 + e);
    ups.emplace_back(inter * hidden);
    for (float &v : ups.back()) {
      v = 0.05f * rng.normal();
    }
  }
  std::vector<Exl3MatrixView> gateViews, downViews;
  std::vector<ExpertWeights> dense(experts), mixed(experts);
  gateBf16.resize(experts);
  downBf16.resize(experts);
  for (int64_t e = 0; e < experts; ++e) {
    gateViews.push_back(gates[e].view);
    downViews.push_back(downs[e].view);
    gateBf16[e].resize(inter * hidden);
    downBf16[e].resize(hidden * inter);
    ASSERT_TRUE(exl3ReconstructBf16Ref(gates[e].view, gateBf16[e].data()).ok());
    ASSERT_TRUE(exl3ReconstructBf16Ref(downs[e].view, downBf16[e].data()).ok());
    dense[e] = {WeightView::raw(gateBf16[e].data(), DType::BF16, {inter, hidden}),
                WeightView::f32(ups[e].data(), {inter, hidden}),
                WeightView::raw(downBf16[e].data(), DType::BF16, {hidden, inter})};
    mixed[e].up = dense[e].up;
  }
  std::vector<float> x(tokens * hidden), weights(tokens * topK);
  for (float &v : x) {
    v = rng.normal();
  }
  for (float &v : weights) {
    v = rng.uniform();
  }
  // Expert 3 gets no token.
  const std::vector<int32_t> ids = {0, 1, 1, 2, 2, 0, 1, 0, 0, 2, 2, 1};
  MoeExpertsArgs args{.x = x.data(),
                      .expertIds = ids.data(),
                      .expertWeights = weights.data(),
                      .experts = dense.data(),
                      .tokens = tokens,
                      .hidden = hidden,
                      .numExperts = experts,
                      .topK = topK,
                      .intermediate = inter,
                      .swigluLimit = 7.0f};
  std::vector<float> expected(tokens * hidden), out(tokens * hidden);
  args.out = expected.data();
  ASSERT_TRUE(moeExpertsRef(args).ok());
  args.experts = mixed.data();
  args.out = out.data();
  ASSERT_TRUE(
      exl3MoeExpertsRef({.moe = args, .exl3Gate = gateViews.data(), .exl3Down = downViews.data()})
          .ok());
  EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * 4), 0);
}

/// Writes safetensors files of EXL3 layers to a temporary directory for the reader's checks.
class Exl3Reader : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("exl3_reader_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static TensorSpec tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                           std::vector<uint8_t> bytes = {}) {
    return {std::move(name), dtype, std::move(shape), [bytes](std::span<uint8_t> out) {
              std::memset(out.data(), 0, out.size());
              std::memcpy(out.data(), bytes.data(), std::min(bytes.size(), out.size()));
            }};
  }
  static std::vector<uint8_t> bytesOf(const std::vector<uint16_t> &v) {
    std::vector<uint8_t> b(v.size() * 2);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  /// A layer "l" of `out` x `in` features and K bits, from a RandomMatrix; `extra` added.
  std::unique_ptr<Checkpoint> write(const RandomMatrix &r, std::vector<TensorSpec> extra = {},
                                    bool marker = true) {
    const int64_t k = r.view.k(), n = r.view.n();
    std::vector<TensorSpec> specs = {
        tensor("l.trellis", DType::I16, {k / 16, n / 16, 16 * r.view.bits}, bytesOf(r.trellis)),
        tensor("l.suh", DType::F16, {k}, bytesOf(r.suh)),
        tensor("l.svh", DType::F16, {n}, bytesOf(r.svh))};
    if (marker) {
      const uint32_t value = kExl3McgMarker;
      specs.push_back(tensor(
          "l.mcg", DType::I32, {},
          {uint8_t(value), uint8_t(value >> 8), uint8_t(value >> 16), uint8_t(value >> 24)}));
    }
    for (TensorSpec &s : extra) {
      specs.push_back(std::move(s));
    }
    std::filesystem::remove(dir_ / "model.safetensors");
    EXPECT_TRUE(writeSafeTensors(dir_ / "model.safetensors", specs).ok());
    Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(dir_);
    EXPECT_TRUE(ck.ok()) << ck.status().toString();
    return std::move(ck).value();
  }

  std::filesystem::path dir_;
};

TEST_F(Exl3Reader, DequantizingACheckpointLayerEqualsTheReferenceDecode) {
  RandomMatrix r(70, 300, 5, Exl3Codebook::Mcg, 43);
  std::unique_ptr<Checkpoint> ck = write(r);
  Expected<Exl3Tensors> layer = findExl3Tensors(*ck, "l", 300, 70);
  ASSERT_TRUE(layer.ok()) << layer.status().toString();
  EXPECT_EQ(layer->bits, 5);
  EXPECT_EQ(layer->codebook, Exl3Codebook::Mcg);
  EXPECT_EQ(layer->k, 384);
  EXPECT_EQ(layer->n, 128);
  EXPECT_EQ(layer->storedBytes(), uint64_t(384 * 128 * 5 / 8 + 2 * 384 + 2 * 128 + 4));
  std::vector<uint16_t> fromFile(70 * 300), fromMemory(70 * 300);
  ASSERT_TRUE(exl3ReconstructBf16Ref(exl3MatrixOf(*layer, 300, 70), fromFile.data()).ok());
  ASSERT_TRUE(exl3ReconstructBf16Ref(r.view, fromMemory.data()).ok());
  EXPECT_EQ(fromFile, fromMemory);
  // Without a marker the codebook is 3INST.
  ck = write(r, {}, /*marker=*/false);
  EXPECT_EQ(findExl3Tensors(*ck, "l")->codebook, Exl3Codebook::Inst3);
}

TEST_F(Exl3Reader, RefusesWhatIsNotExllamav3sLayout) {
  RandomMatrix r(128, 128, 4, Exl3Codebook::Mcg, 47);
  auto expectError = [&](std::unique_ptr<Checkpoint> ck, const std::string &needle,
                         std::optional<int64_t> in = std::nullopt,
                         std::optional<int64_t> out = std::nullopt) {
    Expected<Exl3Tensors> layer = findExl3Tensors(*ck, "l", in, out);
    ASSERT_FALSE(layer.ok()) << needle;
    EXPECT_NE(layer.status().message().find(needle), std::string::npos) << layer.status().message();
  };
  // Legacy packed signs, named.
  expectError(write(r, {tensor("l.su", DType::I16, {8})}), "'l.su'");
  expectError(write(r, {tensor("l.sv", DType::I16, {8})}), "'l.sv'");
  // Both markers.
  expectError(write(r, {tensor("l.mul1", DType::I32, {})}), "both codebook markers");
  // Features that do not pad to the trellis.
  expectError(write(r), "input features", 300, 128);
  expectError(write(r), "output features", 128, 129);
  // A trellis that is not I16 [k/16, n/16, 16K] with K in 1..8.
  {
    std::vector<TensorSpec> specs = {tensor("l.trellis", DType::I16, {8, 8, 144}),
                                     tensor("l.suh", DType::F16, {128}),
                                     tensor("l.svh", DType::F16, {128})};
    ASSERT_TRUE(writeSafeTensors(dir_ / "model.safetensors", specs).ok());
    expectError(std::move(Checkpoint::open(dir_)).value(), "K in 1..8");
  }
  // A missing svh, named.
  {
    std::vector<TensorSpec> specs = {tensor("l.trellis", DType::I16, {8, 8, 64}),
                                     tensor("l.suh", DType::F16, {128})};
    ASSERT_TRUE(writeSafeTensors(dir_ / "model.safetensors", specs).ok());
    expectError(std::move(Checkpoint::open(dir_)).value(), "'l.svh'");
  }
  // The pre-sliced "shared_h_v1" variant.
  {
    std::vector<TensorSpec> specs = {tensor("l.rank0.trellis", DType::I16, {8, 8, 64})};
    ASSERT_TRUE(writeSafeTensors(dir_ / "model.safetensors", specs).ok());
    std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(dir_)).value();
    EXPECT_TRUE(hasExl3Tensors(*ck, "l"));
    expectError(std::move(ck), "shared_h_v1");
  }
}

/// A plan of one weight binding, enough for loadPlanWeights.
std::vector<uint8_t> onePlan(plan::ShardKind shard, uint32_t dim, std::vector<int64_t> global,
                             std::vector<int64_t> local, uint64_t bytes) {
  flatbuffers::FlatBufferBuilder b;
  const plan::Slice slice(0, 0, bytes);
  std::vector<flatbuffers::Offset<plan::WeightBinding>> weights = {plan::CreateWeightBindingDirect(
      b, "w", "l.weight", 0, plan::WeightFormat::EXL3, &global, shard, dim,
      plan::WeightLayout::AsStored, plan::ElementType::BF16, &local, &slice)};
  b.Finish(plan::CreatePlanDirect(b, 0, "test", "", "", 0, /*tp=*/2, plan::Precision::F32, nullptr,
                                  &weights));
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

TEST_F(Exl3Reader, TensorParallelRanksHoldTheirBlocksOfTheLayer) {
  // §1.1's split: by outputs, tile columns and svh; by inputs, tile rows and suh. Each rank's
  // part reconstructs to exactly its block of the whole weight.
  RandomMatrix r(256, 256, 3, Exl3Codebook::Mcg, 53);
  std::unique_ptr<Checkpoint> ck = write(r);
  std::vector<uint16_t> whole(256 * 256);
  ASSERT_TRUE(exl3ReconstructBf16Ref(r.view, whole.data()).ok());
  for (auto [shard, dim] :
       {std::pair{plan::ShardKind::Column, 0u}, std::pair{plan::ShardKind::Row, 1u}}) {
    const std::vector<int64_t> local =
        dim == 0 ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{256, 128};
    const uint64_t bytes = Exl3ArenaLayout::bytesFor(1, local[0], local[1], 3);
    const std::vector<uint8_t> planBytes = onePlan(shard, dim, {256, 256}, local, bytes);
    for (uint32_t rank : {0u, 1u}) {
      SCOPED_TRACE(strCat(dim == 0 ? "column" : "row", " rank ", rank));
      std::vector<uint8_t> arena(bytes);
      Status s = loadPlanWeights(*plan::GetPlan(planBytes.data()), *ck, rank, arena);
      ASSERT_TRUE(s.ok()) << s.toString();
      const Exl3ArenaLayout layout =
          Exl3ArenaLayout::fromSlice(1, local[0], local[1], bytes).value();
      std::vector<uint16_t> part(128 * 256);
      ASSERT_TRUE(
          exl3ReconstructBf16Ref(exl3MatrixInArena(arena.data(), layout, 0), part.data()).ok());
      for (int64_t o = 0; o < local[0]; ++o) {
        for (int64_t i = 0; i < local[1]; ++i) {
          const int64_t go = dim == 0 ? rank * 128 + o : o, gi = dim == 1 ? rank * 128 + i : i;
          ASSERT_EQ(part[o * local[1] + i], whole[go * 256 + gi]) << o << ", " << i;
        }
      }
    }
  }
  // A split that cuts a Hadamard block is refused, naming the weight.
  const std::vector<uint8_t> bad = onePlan(plan::ShardKind::Column, 0, {256, 256}, {64, 256},
                                           Exl3ArenaLayout::bytesFor(1, 64, 256, 3));
  std::vector<uint8_t> arena(Exl3ArenaLayout::bytesFor(1, 64, 256, 3));
  Status s = loadPlanWeights(*plan::GetPlan(bad.data()), *ck, 0, arena);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("weight w: EXL3 rank slices of 64 output features"), std::string::npos)
      << s.message();
  // A plan compiled for fewer bits than the checkpoint holds is refused, naming the tensor.
  const std::vector<uint8_t> small = onePlan(plan::ShardKind::Replicated, 0, {256, 256}, {256, 256},
                                             Exl3ArenaLayout::bytesFor(1, 256, 256, 2));
  arena.assign(Exl3ArenaLayout::bytesFor(1, 256, 256, 2), 0);
  s = loadPlanWeights(*plan::GetPlan(small.data()), *ck, 0, arena);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'l.trellis'"), std::string::npos) << s.message();
}

TEST(Exl3Layout, ArenaSliceSizesAndOffsets) {
  // Two [64, 128] experts at K = 4: k = n = 128.
  const Exl3ArenaLayout l{2, 128, 64, 128, 128, 4};
  EXPECT_EQ(l.trellisStride(), 8192u);
  EXPECT_EQ(l.suhOffset(), 16384u);
  EXPECT_EQ(l.svhOffset(), 16384u + 512u);
  EXPECT_EQ(l.metaOffset(), 16384u + 1024u);
  EXPECT_EQ(l.bytes(), 16384u + 1024u + 16u);
  EXPECT_EQ(Exl3ArenaLayout::bytesFor(2, 64, 128, 4), l.bytes());
  Expected<Exl3ArenaLayout> back = Exl3ArenaLayout::fromSlice(2, 64, 128, l.bytes());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->slotBits, 4);
  EXPECT_FALSE(Exl3ArenaLayout::fromSlice(2, 64, 128, l.bytes() + 2).ok());
}

TEST(Exl3Config, QuantizationConfigIsReadAndChecked) {
  // The tiny preset's config with a quantization_config at the top level, where transformers
  // keeps it.
  const std::string tiny = glm53::synthConfigJson("tiny", 4).value();
  const std::string base = "{\"quantization_config\": ";
  auto config = [&](const std::string &quantization) {
    return base + quantization + ", " + tiny.substr(tiny.find('{') + 1);
  };
  Expected<glm53::Glm53Config> ok = glm53::parseGlm53Config(
      config(R"({"quant_method": "exl3", "version": "1.4.1", "bits": 4.03, "head_bits": 6,
      "calibration": {"rows": 250, "cols": 2048}, "out_scales": "always", "codebook": "mul1"})"),
      "config.json");
  ASSERT_TRUE(ok.ok()) << ok.status().toString();
  EXPECT_EQ(ok->quantMethod, "exl3");
  ASSERT_TRUE(ok->exl3.has_value());
  EXPECT_EQ(ok->exl3->codebook, "mul1");
  EXPECT_EQ(ok->exl3->version, "1.4.1");
  EXPECT_DOUBLE_EQ(*ok->exl3->bits, 4.03);
  for (auto [field, bad] :
       {std::pair{"codebook", R"("mcg2")"}, std::pair{"bits", "0"},
        std::pair{"out_scales", R"("sometimes")"}, std::pair{"head_bits", R"("six")"}}) {
    Expected<glm53::Glm53Config> c = glm53::parseGlm53Config(
        config(R"({"quant_method": "exl3", ")" + std::string(field) + "\": " + bad + "}"),
        "config.json");
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_NE(c.status().message().find(std::string("quantization_config.") + field),
              std::string::npos)
        << c.status().message();
  }
}

} // namespace
} // namespace glm::kernels
