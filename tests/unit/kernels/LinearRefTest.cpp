// Tests of y = x Wᵀ + b for every weight dtype, threaded and not.
#include "kernels/linear/linear.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>

namespace glm::kernels {
namespace {

/// y[r][o] = Σ_i x[r][i]·w[o][i] + b[o], the obvious way.
std::vector<float> naiveLinear(const std::vector<float> &x, const std::vector<float> &w,
                               const std::vector<float> &b, int64_t rows, int64_t in, int64_t out) {
  std::vector<float> y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) {
        s += double(x[r * in + i]) * w[o * in + i];
      }
      y[r * out + o] = static_cast<float>(s);
    }
  }
  return y;
}

TEST(LinearRef, MatchesTheNaiveProductForEveryDtype) {
  SplitMix64 rng(5);
  const int64_t rows = 3, in = 37, out = 21;
  const std::vector<float> x = randomFloats(rng, rows * in);
  const std::vector<float> w = bf16Rounded(randomFloats(rng, out * in, 0.2f));
  const std::vector<float> b = randomFloats(rng, out);
  const std::vector<uint16_t> wBf16 = toBf16(w);
  // fp8: codes plus one scale per 16 x 16 block.
  std::vector<uint8_t> wFp8(out * in);
  std::vector<float> wFp8Values(out * in);
  const std::vector<float> scales = {0.5f, 2.0f, 0.25f, 1.0f, 3.0f, 0.125f};
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      wFp8[o * in + i] = floatToFp8E4m3(w[o * in + i] * 8.0f);
      wFp8Values[o * in + i] = fp8E4m3ToFloat(wFp8[o * in + i]) * scales[(o / 16) * 3 + i / 16];
    }
  }
  WeightView fp8 = WeightView::raw(wFp8.data(), DType::F8_E4M3, {out, in});
  fp8.blockScaleInv = scales.data();
  fp8.blockRows = 16;
  fp8.blockCols = 16;

  struct Case {
    WeightView weight;
    const std::vector<float> *values;
  };
  for (const Case &c :
       {Case{WeightView::f32(w.data(), {out, in}), &w},
        Case{WeightView::raw(wBf16.data(), DType::BF16, {out, in}), &w}, Case{fp8, &wFp8Values}}) {
    std::vector<float> y(rows * out);
    ASSERT_TRUE(linearRef({.x = x.data(),
                           .weight = c.weight,
                           .bias = WeightView::f32(b.data(), {out}),
                           .y = y.data(),
                           .rows = rows,
                           .inFeatures = in,
                           .outFeatures = out})
                    .ok());
    EXPECT_LE(maxRelativeError(y, naiveLinear(x, *c.values, b, rows, in, out)), 1e-6)
        << dtypeName(c.weight.dtype);
  }
}

// Q4 groups as kernels/common/DenseFormats.h defines them, decoded by hand from the bytes: codes
// two a byte (even element in the low nibble) from offset 0, then at q4GroupsOffset an f16
// (scale, minimum) per 64 features of a row; w = f32(scale) · q + f32(minimum), product and sum
// each rounded to f32. The view's values equal those bit for bit, and linearRef over the view the
// dot product with them.
TEST(LinearRef, Q4GroupsAreTheFormatsValues) {
  SplitMix64 rng(7);
  const int64_t rows = 3, in = 192, out = 5, groupsPerRow = in / kQ4Group;
  std::vector<uint8_t> bytes(q4Bytes(1, out, in), 0);
  for (int64_t i = 0; i < out * in / 2; ++i) {
    bytes[i] = static_cast<uint8_t>(rng.next() & 0xFF);
  }
  const int64_t groupsAt = q4GroupsOffset(1, out, in);
  EXPECT_EQ(groupsAt % kDenseFormatAlign, 0);
  for (int64_t gi = 0; gi < out * groupsPerRow; ++gi) {
    // Finite f16 bits of any exponent but the largest ones (no product overflows f32's range).
    for (int half = 0; half < 2; ++half) {
      const uint16_t bits = static_cast<uint16_t>((rng.next() & 0xBFFF));
      std::memcpy(bytes.data() + groupsAt + 4 * gi + 2 * half, &bits, 2);
    }
  }
  std::vector<float> w(out * in);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t c = 0; c < in; ++c) {
      const uint8_t byte = bytes[o * (in / 2) + c / 2];
      const uint32_t q = c % 2 == 0 ? byte & 0xF : byte >> 4;
      uint16_t scale, minimum;
      const int64_t at = groupsAt + 4 * (o * groupsPerRow + c / kQ4Group);
      std::memcpy(&scale, bytes.data() + at, 2);
      std::memcpy(&minimum, bytes.data() + at + 2, 2);
      volatile float product = f16ToFloat(scale) * static_cast<float>(q); // no fused multiply-add
      w[o * in + c] = product + f16ToFloat(minimum);
    }
  }
  const WeightView view =
      WeightView::encoded(bytes.data(), DenseEncoding::Q4, DType::BF16, out, in);
  std::vector<float> row(in);
  for (int64_t o = 0; o < out; ++o) {
    view.loadRow(o, row.data());
    for (int64_t c = 0; c < in; ++c) {
      ASSERT_EQ(std::bit_cast<uint32_t>(row[c]), std::bit_cast<uint32_t>(w[o * in + c]))
          << "element (" << o << ", " << c << ")";
    }
  }
  const std::vector<float> x = randomFloats(rng, rows * in);
  std::vector<float> y(rows * out);
  ASSERT_TRUE(linearRef({.x = x.data(),
                         .weight = view,
                         .y = y.data(),
                         .rows = rows,
                         .inFeatures = in,
                         .outFeatures = out})
                  .ok());
  EXPECT_LE(maxRelativeError(y, naiveLinear(x, w, {}, rows, in, out)), 1e-6);
}

TEST(LinearRef, ThreadedProductEqualsTheNaiveOne) {
  // Big enough (rows·in·out ≥ 2^18) to run on the pool; each element is still one dot product.
  SplitMix64 rng(6);
  const int64_t rows = 9, in = 200, out = 301;
  const std::vector<float> x = randomFloats(rng, rows * in);
  const std::vector<float> w = randomFloats(rng, out * in, 0.1f);
  std::vector<float> y(rows * out);
  ASSERT_TRUE(linearRef({.x = x.data(),
                         .weight = WeightView::f32(w.data(), {out, in}),
                         .y = y.data(),
                         .rows = rows,
                         .inFeatures = in,
                         .outFeatures = out})
                  .ok());
  EXPECT_LE(maxRelativeError(y, naiveLinear(x, w, {}, rows, in, out)), 1e-6);
}

TEST(LinearRef, RejectsAWeightOfTheWrongShape) {
  const std::vector<float> x(4), w(12);
  std::vector<float> y(3);
  const Status s = linearRef({.x = x.data(),
                              .weight = WeightView::f32(w.data(), {4, 3}),
                              .y = y.data(),
                              .rows = 1,
                              .inFeatures = 4,
                              .outFeatures = 3});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected [3, 4]"), std::string::npos) << s.message();
}

} // namespace
} // namespace glm::kernels
