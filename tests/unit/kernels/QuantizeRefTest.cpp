// Tests of the load-time quantizers (Q4 groups with an error search, fp8 blocks) against the
// formats' definition in kernels/common/DenseFormats.h, and of the direction ablation.
#include "kernels/common/FloatFormats.h"
#include "kernels/common/ParallelFor.h"
#include "kernels/common/WeightView.h"
#include "kernels/quantize/quantize.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace glm::kernels {
namespace {

/// Student-t with nu degrees of freedom (Box-Muller normals from 53-bit uniforms), times `scale`.
std::vector<float> studentT(SplitMix64 &rng, size_t n, int nu, float scale) {
  auto uniform = [&] { return (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1p-53; };
  auto normal = [&] {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
  };
  std::vector<float> v(n);
  for (float &x : v) {
    double chi2 = 0.0;
    for (int k = 0; k < nu; ++k) {
      const double y = normal();
      chi2 += y * y;
    }
    x = static_cast<float>(normal() / std::sqrt(chi2 / nu) * scale);
  }
  return v;
}

/// The stored value of code q by DenseFormats.h, written out here (volatile: no contraction into
/// a fused multiply-add whatever this file's compile flags).
float q4ByHand(uint16_t scale, uint32_t q, uint16_t minimum) {
  volatile float product = f16ToFloat(scale) * static_cast<float>(q);
  return product + f16ToFloat(minimum);
}

struct Q4Bytes {
  std::vector<uint8_t> bytes;
  int64_t rows = 0, cols = 0;
  uint32_t code(int64_t r, int64_t c) const { return q4Code(bytes.data(), cols, r, c); }
  uint16_t param(int64_t r, int64_t g, int which) const {
    uint16_t v;
    std::memcpy(
        &v, bytes.data() + q4GroupsOffset(1, rows, cols) + 4 * (r * (cols / 64) + g) + 2 * which,
        2);
    return v;
  }
  uint16_t scale(int64_t r, int64_t g) const { return param(r, g, 0); }
  uint16_t minimum(int64_t r, int64_t g) const { return param(r, g, 1); }
  float value(int64_t r, int64_t c) const {
    return q4ByHand(scale(r, c / 64), code(r, c), minimum(r, c / 64));
  }
  WeightView view() const {
    return WeightView::encoded(bytes.data(), DenseEncoding::Q4, DType::F32, rows, cols);
  }
};

Q4Bytes q4(const std::vector<float> &w, int64_t rows, int64_t cols, const Q4Search &search,
           QuantizeStats *stats = nullptr) {
  Q4Bytes out;
  out.rows = rows;
  out.cols = cols;
  out.bytes.assign(q4Bytes(1, rows, cols), 0xAB); // every byte must be written
  const Status s =
      quantizeQ4(WeightView::f32(w.data(), {rows, cols}), search, out.bytes.data(), stats);
  EXPECT_TRUE(s.ok()) << s.toString();
  return out;
}

/// Σ (stored − source)² of group g of row r, in double.
double groupError(const Q4Bytes &q, const std::vector<float> &w, int64_t r, int64_t g) {
  double e2 = 0.0;
  for (int64_t c = g * 64; c < (g + 1) * 64; ++c) {
    const double e = static_cast<double>(q.value(r, c)) - w[r * q.cols + c];
    e2 += e * e;
  }
  return e2;
}

TEST(QuantizeSearch, F16RoundingMatchesTheDoubleConversion) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(qF16ToFloat(static_cast<uint16_t>(h))));
      continue;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(qF16ToFloat(static_cast<uint16_t>(h))),
              std::bit_cast<uint32_t>(f))
        << h;
    EXPECT_EQ(qFloatToF16(f), h) << h;
  }
  // Midpoints (ties to even), and random f32 bit patterns across the whole range.
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const double mid = (static_cast<double>(f16ToFloat(static_cast<uint16_t>(h))) +
                        f16ToFloat(static_cast<uint16_t>(h + 1))) /
                       2.0;
    const float m = static_cast<float>(mid); // exact: f32 has 13 more bits than f16
    ASSERT_EQ(static_cast<double>(m), mid);
    EXPECT_EQ(qFloatToF16(m), doubleToF16(mid)) << h;
    EXPECT_EQ(qFloatToF16(-m), doubleToF16(-mid)) << h;
  }
  SplitMix64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng.next()));
    if (!std::isnan(x)) {
      EXPECT_EQ(qFloatToF16(x), doubleToF16(static_cast<double>(x))) << x;
    }
  }
  EXPECT_EQ(qFloatToF16(65519.99f), 0x7BFF);
  EXPECT_EQ(qFloatToF16(65520.0f), 0x7C00);
}

TEST(QuantizeSearch, CodesRoundToNearestWithTiesToEvenAndClamp) {
  // scale 1, minimum 0: t = w exactly.
  EXPECT_EQ(q4RoundCode(2.5f, 0.0f, 1.0f), 2.0f);
  EXPECT_EQ(q4RoundCode(3.5f, 0.0f, 1.0f), 4.0f);
  EXPECT_EQ(q4RoundCode(3.4999998f, 0.0f, 1.0f), 3.0f);
  EXPECT_EQ(q4RoundCode(0.49999997f, 0.0f, 1.0f), 0.0f); // floor(t + 0.5) would give 1
  EXPECT_EQ(q4RoundCode(-7.0f, 0.0f, 1.0f), 0.0f);
  EXPECT_EQ(q4RoundCode(14.5f, 0.0f, 1.0f), 14.0f);
  EXPECT_EQ(q4RoundCode(15.5f, 0.0f, 1.0f), 15.0f);
  EXPECT_EQ(q4RoundCode(1e9f, 0.0f, 1.0f), 15.0f);
  EXPECT_EQ(q4RoundCode(-0.0f, 0.0f, 1.0f), 0.0f);
}

TEST(QuantizeQ4, DequantizedBytesAreTheFormatsValues) {
  SplitMix64 rng(11);
  const int64_t rows = 5, cols = 192;
  const std::vector<float> w = bf16Rounded(studentT(rng, rows * cols, 5, 0.02f));
  const std::vector<uint16_t> wBf16 = toBf16(w);
  Q4Bytes q;
  q.rows = rows;
  q.cols = cols;
  q.bytes.assign(q4Bytes(1, rows, cols), 0xAB);
  QuantizeStats stats;
  ASSERT_TRUE(
      quantizeQ4(WeightView::raw(wBf16.data(), DType::BF16, {rows, cols}), q.bytes.data(), &stats)
          .ok());
  // Padding between the code plane and the group plane is zero.
  for (int64_t i = rows * cols / 2; i < q4GroupsOffset(1, rows, cols); ++i) {
    EXPECT_EQ(q.bytes[i], 0) << i;
  }
  const WeightView view = q.view();
  ASSERT_TRUE(checkWeight(view, "q4", {rows, cols}).ok());
  std::vector<float> row(cols);
  double e2 = 0.0, s2 = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    view.loadRow(r, row.data());
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(std::bit_cast<uint32_t>(row[c]), std::bit_cast<uint32_t>(q.value(r, c)))
          << r << "," << c;
      const double e = static_cast<double>(row[c]) - w[r * cols + c];
      e2 += e * e;
      s2 += static_cast<double>(w[r * cols + c]) * w[r * cols + c];
    }
  }
  EXPECT_EQ(stats.elements, rows * cols);
  EXPECT_NEAR(stats.sumSquaredError, e2, 1e-12 * e2);
  EXPECT_NEAR(stats.sumSquaredSource, s2, 1e-12 * s2);
  EXPECT_NEAR(stats.relativeRms(), std::sqrt(e2 / s2), 1e-9);
  EXPECT_GT(stats.relativeRms(), 0.01);
  EXPECT_LT(stats.relativeRms(), 0.2);
}

TEST(QuantizeQ4, EachCodeIsTheNearestLevelOfItsGroup) {
  SplitMix64 rng(12);
  const int64_t rows = 8, cols = 256;
  const std::vector<float> w = studentT(rng, rows * cols, 3, 0.05f);
  const Q4Bytes q = q4(w, rows, cols, Q4Search{});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t code = q.code(r, c);
      const double x = w[r * cols + c];
      const double here = std::fabs(q.value(r, c) - x);
      for (uint32_t other = 0; other < 16; ++other) {
        const double there =
            std::fabs(q4ByHand(q.scale(r, c / 64), other, q.minimum(r, c / 64)) - x);
        // Nearest up to the f32 rounding of (w − m)/s, a few ulps of the group's values.
        EXPECT_LE(here, there + 1e-6 * std::fabs(x) + 1e-9) << r << "," << c << " code " << code;
      }
    }
  }
}

TEST(QuantizeQ4, RequantizingTheDequantizedMatrixGivesTheSameBytes) {
  // A group whose codes reach both 0 and 15 decodes to values whose min-max candidate is exactly
  // its own (scale, minimum) with error 0, the least possible, and the search keeps the first of
  // equals: requantization reproduces it bit for bit. (A group whose codes miss an end decodes to
  // a narrower range and is re-fitted to it, so only the full-range groups are compared.)
  SplitMix64 rng(13);
  const int64_t rows = 16, cols = 512;
  const std::vector<float> w = studentT(rng, rows * cols, 5, 0.02f);
  const Q4Bytes first = q4(w, rows, cols, Q4Search{});
  std::vector<float> decoded(rows * cols);
  first.view().loadAll(decoded.data());
  QuantizeStats again;
  const Q4Bytes second = q4(decoded, rows, cols, Q4Search{}, &again);
  int64_t fullRange = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols / 64; ++g) {
      bool low = false, high = false;
      for (int64_t c = g * 64; c < (g + 1) * 64; ++c) {
        low |= first.code(r, c) == 0;
        high |= first.code(r, c) == 15;
      }
      if (!low || !high) {
        continue;
      }
      ++fullRange;
      EXPECT_EQ(second.scale(r, g), first.scale(r, g)) << r << "," << g;
      EXPECT_EQ(second.minimum(r, g), first.minimum(r, g)) << r << "," << g;
      for (int64_t c = g * 64; c < (g + 1) * 64; ++c) {
        EXPECT_EQ(second.code(r, c), first.code(r, c)) << r << "," << c;
      }
      EXPECT_EQ(groupError(second, decoded, r, g), 0.0);
    }
  }
  // Clipped candidates put the clipped values on the end codes: nearly every group is full-range.
  EXPECT_GE(fullRange, rows * cols / 64 * 9 / 10);
}

TEST(QuantizeQ4, SearchIsNeverWorseThanMinMaxAndBetterOnHeavyTails) {
  SplitMix64 rng(14);
  const int64_t rows = 64, cols = 1024;
  for (int nu : {3, 5}) {
    const std::vector<float> w = studentT(rng, rows * cols, nu, 0.02f);
    QuantizeStats searched, plain;
    const Q4Bytes s = q4(w, rows, cols, Q4Search{}, &searched);
    const Q4Bytes p = q4(w, rows, cols, q4MinMax(), &plain);
    int64_t better = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < cols / 64; ++g) {
        // In the search's own f32 measure the winner's error is never above min-max's; recomputed
        // in double, up to that measure's rounding.
        const float *x = w.data() + r * cols + g * 64;
        EXPECT_LE(q4FitGroup(x, Q4Search{}).error, q4FitGroup(x, q4MinMax()).error);
        const double es = groupError(s, w, r, g), ep = groupError(p, w, r, g);
        EXPECT_LE(es, ep * (1.0 + 1e-5)) << "nu " << nu << " row " << r << " group " << g;
        better += es < ep ? 1 : 0;
      }
    }
    // Better in most groups, and by several percent of RMS error overall.
    EXPECT_GT(better, rows * cols / 64 * 3 / 4) << nu;
    EXPECT_LT(searched.relativeRms(), 0.95 * plain.relativeRms()) << nu;
  }
}

TEST(QuantizeQ4, ConstantGroupsStoreScaleZeroAndTheirValue) {
  const int64_t rows = 2, cols = 128;
  std::vector<float> w(rows * cols, 0.3f);
  for (int64_t c = 64; c < 128; ++c) {
    w[c] = 0.0f; // row 0, group 1: zeros
  }
  for (int64_t c = 0; c < 64; ++c) {
    w[cols + 64 + c] = 0.01f * static_cast<float>(c); // row 1, group 1: a ramp
  }
  QuantizeStats stats;
  const Q4Bytes q = q4(w, rows, cols, Q4Search{}, &stats);
  for (auto [r, g, value] :
       {std::tuple{0, 0, 0.3f}, std::tuple{0, 1, 0.0f}, std::tuple{1, 0, 0.3f}}) {
    EXPECT_EQ(q.scale(r, g), 0) << r << "," << g;
    EXPECT_EQ(q.minimum(r, g), doubleToF16(value)) << r << "," << g;
    for (int64_t c = g * 64; c < (g + 1) * 64; ++c) {
      EXPECT_EQ(q.code(r, c), 0u);
      EXPECT_EQ(q.value(r, c), f16ToFloat(doubleToF16(value)));
    }
  }
  EXPECT_GT(q.scale(1, 1), 0);
  EXPECT_EQ(q.value(0, 70), 0.0f);
}

TEST(QuantizeQ4, RefusesBadShapesAndNonFiniteValues) {
  std::vector<float> w(4 * 100, 0.5f);
  std::vector<uint8_t> out(1 << 16);
  Status s = quantizeQ4(WeightView::f32(w.data(), {4, 100}), out.data());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("[4, 100]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("64"), std::string::npos) << s.message();
  s = quantizeQ4(WeightView::f32(w.data(), {400}), out.data());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);

  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> v(8 * 128, 0.25f);
    v[3 * 128 + 17] = bad;
    v[5 * 128 + 2] = bad; // a later one: the first is named
    s = quantizeQ4(WeightView::f32(v.data(), {8, 128}), out.data());
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
    EXPECT_NE(s.message().find("row 3, column 17"), std::string::npos) << s.message();
  }
  std::vector<float> huge(2 * 64, 1.0f);
  huge[70] = 1e6f; // beyond f16
  s = quantizeQ4(WeightView::f32(huge.data(), {2, 64}), out.data());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("row 1"), std::string::npos) << s.message();
}

struct Fp8Bytes {
  std::vector<uint8_t> bytes;
  int64_t rows = 0, cols = 0;
  float scaleInv(int64_t rb, int64_t cb) const {
    float v;
    std::memcpy(
        &v, bytes.data() + fp8ScalesOffset(1, rows, cols) + 4 * (rb * fp8BlocksOf(cols) + cb), 4);
    return v;
  }
  float value(int64_t r, int64_t c) const {
    return fp8E4m3ToFloat(bytes[r * cols + c]) * scaleInv(r / 128, c / 128);
  }
};

Fp8Bytes fp8(const std::vector<float> &w, int64_t rows, int64_t cols,
             QuantizeStats *stats = nullptr, Fp8Search search = {}) {
  Fp8Bytes out;
  out.rows = rows;
  out.cols = cols;
  out.bytes.assign(fp8Bytes(1, rows, cols), 0xAB);
  const Status s =
      quantizeFp8Blocks(WeightView::f32(w.data(), {rows, cols}), search, out.bytes.data(), stats);
  EXPECT_TRUE(s.ok()) << s.toString();
  return out;
}

TEST(QuantizeFp8, EncoderMatchesFloatFormats) {
  // Every exponent and sign, every kept mantissa bit pattern, and the bits below them at the
  // rounding boundaries (ties, one ulp either side) and a few others.
  const uint32_t lows[] = {0x00000u, 0x00001u, 0x7FFFFu, 0x80000u, 0x80001u, 0xFFFFFu, 0x12345u};
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 255; ++exponent) {
      for (uint32_t top = 0; top < 8; ++top) {
        for (uint32_t low : lows) {
          const uint32_t bits = sign << 31 | exponent << 23 | top << 20 | low;
          const float x = std::bit_cast<float>(bits);
          EXPECT_EQ(qFloatToFp8E4m3(x), floatToFp8E4m3(x)) << std::hex << bits;
        }
      }
    }
  }
  // Subnormal targets round on lower bits: sweep [2^-11, 2^-5] finely.
  for (float x = 0x1p-11f; x < 0x1p-5f; x = std::nextafter(x, 1.0f) + 0x1p-30f) {
    EXPECT_EQ(qFloatToFp8E4m3(x), floatToFp8E4m3(x)) << x;
  }
  EXPECT_EQ(qFloatToFp8E4m3(INFINITY), 0x7F);
  EXPECT_EQ(qFloatToFp8E4m3(-INFINITY), 0xFF);
  SplitMix64 rng(23);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng.next()));
    if (std::isnan(x)) {
      EXPECT_EQ(qFloatToFp8E4m3(x) & 0x7F, 0x7F);
    } else {
      EXPECT_EQ(qFloatToFp8E4m3(x), floatToFp8E4m3(x)) << x;
    }
  }
}

TEST(QuantizeFp8, DequantizedBytesAreTheFormatsValues) {
  SplitMix64 rng(21);
  const int64_t rows = 200, cols = 300; // partial blocks at both edges
  std::vector<float> w = studentT(rng, rows * cols, 3, 0.02f);
  for (int64_t r = 0; r < rows; ++r) {
    w[r * cols + 290] *= 20.0f; // an outlier column in the last block
  }
  QuantizeStats stats, plainStats;
  const Fp8Bytes q = fp8(w, rows, cols, &stats);
  const Fp8Bytes plain = fp8(w, rows, cols, &plainStats, Fp8Search{1});
  for (int64_t i = rows * cols; i < fp8ScalesOffset(1, rows, cols); ++i) {
    EXPECT_EQ(q.bytes[i], 0);
  }
  for (int64_t rb = 0; rb < 2; ++rb) {
    for (int64_t cb = 0; cb < 3; ++cb) {
      float amax = 0.0f;
      double searched = 0.0, unsearched = 0.0;
      for (int64_t r = rb * 128; r < std::min<int64_t>(rows, rb * 128 + 128); ++r) {
        for (int64_t c = cb * 128; c < std::min<int64_t>(cols, cb * 128 + 128); ++c) {
          amax = std::max(amax, std::fabs(w[r * cols + c]));
          const double e = static_cast<double>(q.value(r, c)) - w[r * cols + c];
          const double p = static_cast<double>(plain.value(r, c)) - w[r * cols + c];
          searched += e * e;
          unsearched += p * p;
        }
      }
      // The plain quantizer's scale is amax / 448; the search's is one of its 8 candidates and no
      // worse than it.
      EXPECT_EQ(plain.scaleInv(rb, cb), amax / 448.0f) << rb << "," << cb;
      bool candidate = false;
      for (int k = 0; k < 8; ++k) {
        candidate |= q.scaleInv(rb, cb) == amax / 448.0f * (1.0f + static_cast<float>(k) / 8.0f);
      }
      EXPECT_TRUE(candidate) << rb << "," << cb;
      EXPECT_LE(searched, unsearched) << rb << "," << cb;
    }
  }
  EXPECT_LT(stats.relativeRms(), plainStats.relativeRms());
  const WeightView view =
      WeightView::encoded(q.bytes.data(), DenseEncoding::Fp8, DType::F32, rows, cols);
  std::vector<float> row(cols);
  double e2 = 0.0, s2 = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    view.loadRow(r, row.data());
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(std::bit_cast<uint32_t>(row[c]), std::bit_cast<uint32_t>(q.value(r, c)));
      const float x = w[r * cols + c];
      EXPECT_EQ(q.bytes[r * cols + c], floatToFp8E4m3(x / q.scaleInv(r / 128, c / 128)));
      const double e = static_cast<double>(row[c]) - x;
      e2 += e * e;
      s2 += static_cast<double>(x) * x;
    }
  }
  EXPECT_NEAR(stats.relativeRms(), std::sqrt(e2 / s2), 1e-9);
  EXPECT_LT(stats.relativeRms(), 0.05);
}

TEST(QuantizeFp8, ZeroBlocksGetScaleOneAndDecodeToZero) {
  const int64_t rows = 130, cols = 256;
  std::vector<float> w(rows * cols, 0.0f);
  w[5 * cols + 200] = 3.0f; // block (0, 1) is not zero
  const Fp8Bytes q = fp8(w, rows, cols, nullptr, Fp8Search{1});
  EXPECT_EQ(q.scaleInv(0, 0), 1.0f);
  EXPECT_EQ(q.scaleInv(1, 0), 1.0f);
  EXPECT_EQ(q.scaleInv(1, 1), 1.0f);
  EXPECT_EQ(q.scaleInv(0, 1), 3.0f / 448.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(q.value(r, c), w[r * cols + c]) << r << "," << c;
    }
  }
  // A block far below the f32 normal range still gets a scale whose inverse is finite.
  std::vector<float> tiny(64 * 64, 0.0f);
  tiny[0] = 1e-40f;
  const Fp8Bytes t = fp8(tiny, 64, 64);
  EXPECT_EQ(t.scaleInv(0, 0), 0x1p-126f);
  EXPECT_TRUE(std::isfinite(1.0f / t.scaleInv(0, 0)));
}

TEST(QuantizeFp8, LargestValuesSaturateInsteadOfBecomingNaN) {
  // Find block maxima x for which x / (x / 448) rounds above 448 in f32. (Only the plain scale
  // maps the maximum onto 448; the search's other candidates put it below.)
  SplitMix64 rng(22);
  std::vector<float> maxima;
  while (maxima.size() < 8) {
    const float x = 0.5f + rng.uniform();
    if (x / (x / 448.0f) > 448.0f) {
      maxima.push_back(x);
    }
  }
  const int64_t rows = 128, cols = 128 * 8;
  std::vector<float> w = studentT(rng, rows * cols, 3, 0.1f);
  for (int64_t b = 0; b < 8; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = b * 128; c < b * 128 + 128; ++c) {
        float &x = w[r * cols + c];
        x = std::max(-0.99f * maxima[b], std::min(0.99f * maxima[b], x));
      }
    }
    w[7 * cols + b * 128 + 5] = (b & 1) ? -maxima[b] : maxima[b];
  }
  const Fp8Bytes q = fp8(w, rows, cols, nullptr, Fp8Search{1});
  const Fp8Bytes searched = fp8(w, rows, cols);
  for (int64_t b = 0; b < 8; ++b) {
    EXPECT_EQ(q.bytes[7 * cols + b * 128 + 5], (b & 1) ? 0xFE : 0x7E) << b;
  }
  for (int64_t i = 0; i < rows * cols; ++i) {
    EXPECT_NE(q.bytes[i] & 0x7F, 0x7F) << i; // never the NaN code
    EXPECT_NE(searched.bytes[i] & 0x7F, 0x7F) << i;
  }
}

TEST(QuantizeFp8, RefusesNonFiniteValues) {
  std::vector<float> w(300 * 10, 1.0f);
  w[140 * 10 + 3] = NAN;
  std::vector<uint8_t> out(fp8Bytes(1, 300, 10));
  const Status s = quantizeFp8Blocks(WeightView::f32(w.data(), {300, 10}), out.data());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("row 140, column 3"), std::string::npos) << s.message();
}

TEST(Quantize, ResultsDoNotDependOnTheThreadCount) {
  SplitMix64 rng(31);
  const int64_t rows = 300, cols = 640;
  const std::vector<uint16_t> w = toBf16(studentT(rng, rows * cols, 3, 0.02f));
  const WeightView src = WeightView::raw(w.data(), DType::BF16, {rows, cols});
  std::vector<uint8_t> q4Pool(q4Bytes(1, rows, cols)), q4One(q4Pool.size());
  std::vector<uint8_t> fp8Pool(fp8Bytes(1, rows, cols)), fp8One(fp8Pool.size());
  QuantizeStats q4PoolStats, q4OneStats, fp8PoolStats, fp8OneStats;
  ASSERT_TRUE(quantizeQ4(src, q4Pool.data(), &q4PoolStats).ok());
  ASSERT_TRUE(quantizeFp8Blocks(src, fp8Pool.data(), &fp8PoolStats).ok());
  // A parallelFor inside a parallelFor job runs inline: this is the one-thread run.
  parallelFor(2, 1, [&](int64_t begin, int64_t) {
    if (begin == 0) {
      ASSERT_TRUE(quantizeQ4(src, q4One.data(), &q4OneStats).ok());
      ASSERT_TRUE(quantizeFp8Blocks(src, fp8One.data(), &fp8OneStats).ok());
    }
  });
  EXPECT_EQ(q4Pool, q4One);
  EXPECT_EQ(fp8Pool, fp8One);
  EXPECT_EQ(q4PoolStats.sumSquaredError, q4OneStats.sumSquaredError);
  EXPECT_EQ(q4PoolStats.sumSquaredSource, q4OneStats.sumSquaredSource);
  EXPECT_EQ(fp8PoolStats.sumSquaredError, fp8OneStats.sumSquaredError);
}

TEST(AblateDirection, RemovesTheDirectionFromEveryOutput) {
  SplitMix64 rng(41);
  const int64_t out = 96, in = 700;
  const std::vector<float> w0 = randomFloats(rng, out * in, 0.02f);
  std::vector<float> d = randomFloats(rng, out, 3.0f); // not unit length
  double norm = 0.0;
  for (float x : d) {
    norm += static_cast<double>(x) * x;
  }
  norm = std::sqrt(norm);
  auto project = [&](const std::vector<float> &w) {
    std::vector<double> p(in, 0.0);
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t j = 0; j < in; ++j) {
        p[j] += d[o] / norm * w[o * in + j];
      }
    }
    return p;
  };
  const std::vector<double> before = project(w0);
  for (double alpha : {1.0, 0.5, 0.0}) {
    std::vector<float> w = w0;
    ASSERT_TRUE(ablateDirection(w, out, in, d, alpha).ok());
    const std::vector<double> after = project(w);
    double scale = 0.0;
    for (double x : before) {
      scale = std::max(scale, std::fabs(x));
    }
    for (int64_t j = 0; j < in; ++j) {
      // f32 storage of W' bounds the agreement: |d̂| · ulp(w) · sqrt(out).
      EXPECT_NEAR(after[j], (1.0 - alpha) * before[j], 1e-6 * scale) << alpha << " " << j;
    }
    // Only the component along d̂ changes: W' − W = −alpha d̂ pᵀ.
    for (int64_t o = 0; o < out; o += 17) {
      for (int64_t j = 0; j < in; j += 31) {
        EXPECT_NEAR(w[o * in + j], w0[o * in + j] - alpha * d[o] / norm * before[j], 1e-8);
      }
    }
  }
}

TEST(AblateDirection, RefusesAMismatchedOrZeroDirection) {
  std::vector<float> w(64 * 32, 0.1f);
  std::vector<float> d(63, 1.0f);
  Status s = ablateDirection(w, 64, 32, d, 1.0);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("63"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("64"), std::string::npos) << s.message();
  std::vector<float> zero(64, 0.0f);
  s = ablateDirection(w, 64, 32, zero, 1.0);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  s = ablateDirection(std::span<float>(w).first(100), 64, 32, std::vector<float>(64, 1.0f), 1.0);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
}

} // namespace
} // namespace glm::kernels
