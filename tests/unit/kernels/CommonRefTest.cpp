// Tests of the reference kernels' shared pieces: float format conversions, WeightView widening and
// shape checks, top-k tie rules, parallelFor.
#include "kernels/common/FloatFormats.h"
#include "kernels/common/ParallelFor.h"
#include "kernels/common/TopK.h"
#include "kernels/common/WeightView.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cfloat>
#include <cmath>
#include <set>

namespace glm::kernels {
namespace {

TEST(FloatFormats, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0xC040), -3.0f);
  // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7: ties go to even.
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
  EXPECT_EQ(bf16ToFloat(floatToBf16(INFINITY)), INFINITY);
}

TEST(FloatFormats, F16WidensExactly) {
  EXPECT_EQ(f16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(f16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(f16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16ToFloat(0x7C00), INFINITY);
  EXPECT_TRUE(std::isnan(f16ToFloat(0x7E00)));
  EXPECT_TRUE(std::signbit(f16ToFloat(0x8000)));
}

TEST(FloatFormats, Fp8E4m3EveryCodeRoundTrips) {
  EXPECT_EQ(fp8E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(fp8E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(fp8E4m3ToFloat(0xFE), -448.0f);
  EXPECT_EQ(fp8E4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8E4m3ToFloat(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8E4m3ToFloat(0x3C), 1.5f);
  EXPECT_TRUE(std::isnan(fp8E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(fp8E4m3ToFloat(0xFF)));
  for (int code = 0; code < 256; ++code) {
    const float v = fp8E4m3ToFloat(static_cast<uint8_t>(code));
    if (std::isnan(v)) {
      continue;
    }
    if (v == 0.0f) {
      EXPECT_EQ(fp8E4m3ToFloat(floatToFp8E4m3(v)), 0.0f);
      continue;
    }
    EXPECT_EQ(floatToFp8E4m3(v), code) << "code " << code << " value " << v;
  }
  // Halfway between 1 and 1.125 goes to the even mantissa (1); beyond 448 saturates.
  EXPECT_EQ(floatToFp8E4m3(1.0625f), 0x38);
  EXPECT_EQ(floatToFp8E4m3(1.1875f), 0x3A);
  EXPECT_EQ(floatToFp8E4m3(1000.0f), 0x7E);
  EXPECT_EQ(floatToFp8E4m3(-1000.0f), 0xFE);
}

TEST(WeightView, WidensEveryDtype) {
  const std::vector<float> values = {1.0f, -2.5f, 0.375f, 448.0f, 0.0f, -0.0625f};
  const std::vector<uint16_t> bf16 = toBf16(values);
  std::vector<uint16_t> f16 = {0x3C00, 0xC100, 0x3600, 0x5F00, 0x0000, 0xAC00};
  std::vector<uint8_t> fp8;
  for (float v : values) {
    fp8.push_back(floatToFp8E4m3(v));
  }
  for (const WeightView &w :
       {WeightView::f32(values.data(), {2, 3}), WeightView::raw(bf16.data(), DType::BF16, {2, 3}),
        WeightView::raw(f16.data(), DType::F16, {2, 3}),
        WeightView::raw(fp8.data(), DType::F8_E4M3, {2, 3})}) {
    EXPECT_EQ(w.numel(), 6);
    EXPECT_EQ(w.rows(), 2);
    EXPECT_EQ(w.cols(), 3);
    std::vector<float> all(6);
    w.loadAll(all.data());
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(w.load(i), values[i]) << dtypeName(w.dtype) << " element " << i;
      EXPECT_EQ(all[i], values[i]) << dtypeName(w.dtype) << " element " << i;
    }
    std::vector<float> row(3);
    w.loadRow(1, row.data());
    EXPECT_EQ(row, std::vector<float>(values.begin() + 3, values.end()));
  }
}

TEST(WeightView, Fp8AppliesItsBlockScale) {
  // A [3, 5] fp8 weight in 2 x 2 blocks: scales [2, 3]; element (r, c) uses scale (r/2, c/2).
  std::vector<uint8_t> codes(15, floatToFp8E4m3(1.5f));
  const std::vector<float> scales = {1, 2, 3, 4, 5, 6};
  WeightView w = WeightView::raw(codes.data(), DType::F8_E4M3, {3, 5});
  w.blockScaleInv = scales.data();
  w.blockRows = 2;
  w.blockCols = 2;
  for (int r = 0; r < 3; ++r) {
    std::vector<float> row(5);
    w.loadRow(r, row.data());
    for (int c = 0; c < 5; ++c) {
      const float expected = 1.5f * scales[(r / 2) * 3 + c / 2];
      EXPECT_EQ(w.load(r * 5 + c), expected) << r << "," << c;
      EXPECT_EQ(row[c], expected) << r << "," << c;
    }
  }
}

TEST(WeightView, ShapeChecksIgnoreUnitDimensions) {
  const std::vector<float> data(24);
  EXPECT_TRUE(checkWeight(WeightView::f32(data.data(), {6, 1, 4}), "conv", {6, 4}).ok());
  EXPECT_TRUE(checkWeight(WeightView::f32(data.data(), {24}), "v", {24}).ok());
  const Status wrong = checkWeight(WeightView::f32(data.data(), {4, 6}), "w", {6, 4});
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("w has shape [4, 6], expected [6, 4]"), std::string::npos)
      << wrong.message();
  EXPECT_FALSE(checkWeight(WeightView{}, "absent", {1}).ok());
  EXPECT_TRUE(checkOptionalWeight(WeightView{}, "absent", {1}).ok());
  EXPECT_FALSE(checkWeight(WeightView::raw(data.data(), DType::I32, {24}), "ints", {24}).ok());
}

TEST(TopK, LowerIndexBreaksTies) {
  const std::vector<double> v = {1, 3, 2, 3, 3, 0};
  EXPECT_EQ(topkIndices(v, 2, TopkTieRule::LowerIndex), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(topkIndices(v, 4, TopkTieRule::LowerIndex), (std::vector<int64_t>{1, 3, 4, 2}));
  EXPECT_EQ(topkIndices(v, 9, TopkTieRule::LowerIndex).size(), 6u);
  EXPECT_TRUE(topkIndices(v, 0, TopkTieRule::LowerIndex).empty());
}

TEST(TopK, TorchCpuKeepsTheSetTorchKeeps) {
  // Layer 7, query 29 of the tiny fixture's `short` golden: 10 closed pools, 7 of them candidates
  // (the rest at float32 min), and pools 2 and 4 tied at an exact ReLU zero for the 4th place.
  // torch.topk (nth_element: 4·64 > 10) kept pool 4; the lower-index rule keeps pool 2.
  const double m = -static_cast<double>(FLT_MAX);
  const std::vector<double> scores = {0.0189765316f,
                                      0.0175472496f,
                                      0.0,
                                      -0.000328729251f,
                                      0.0,
                                      -0.0432504395f,
                                      0.00888291109f,
                                      m,
                                      m,
                                      m};
  const std::vector<int64_t> torch = topkIndices(scores, 4, TopkTieRule::TorchCpu);
  EXPECT_EQ(std::set<int64_t>(torch.begin(), torch.end()), (std::set<int64_t>{0, 1, 4, 6}));
  const std::vector<int64_t> lower = topkIndices(scores, 4, TopkTieRule::LowerIndex);
  EXPECT_EQ(std::set<int64_t>(lower.begin(), lower.end()), (std::set<int64_t>{0, 1, 2, 6}));
}

TEST(TopK, BothRulesReturnATrueTopK) {
  // Both regimes of the torch replay (nth_element for k·64 > n, partial_sort otherwise), on rows
  // with many exact ties: whatever the tie choice, no dropped value may beat a kept one.
  SplitMix64 rng(7);
  for (int64_t n : {5, 37, 255, 256, 300}) {
    for (int64_t k : {1, 2, 4}) {
      std::vector<double> v(n);
      for (double &x : v) {
        x = static_cast<double>(rng.below(5)); // many ties
      }
      for (TopkTieRule rule : {TopkTieRule::LowerIndex, TopkTieRule::TorchCpu}) {
        const std::vector<int64_t> top = topkIndices(v, k, rule);
        ASSERT_EQ(static_cast<int64_t>(top.size()), k);
        std::set<int64_t> kept(top.begin(), top.end());
        EXPECT_EQ(static_cast<int64_t>(kept.size()), k);
        double minKept = INFINITY;
        for (size_t i = 0; i < top.size(); ++i) {
          minKept = std::min(minKept, v[top[i]]);
          if (i > 0) {
            EXPECT_GE(v[top[i - 1]], v[top[i]]) << "descending order";
          }
        }
        for (int64_t j = 0; j < n; ++j) {
          if (!kept.count(j)) {
            EXPECT_LE(v[j], minKept) << "n " << n << " k " << k;
          }
        }
      }
    }
  }
}

TEST(ParallelFor, VisitsEveryIndexOnceAndNestsInline) {
  std::vector<std::atomic<int>> hits(1000);
  parallelFor(1000, 7, [&](int64_t begin, int64_t end) {
    EXPECT_LE(end - begin, 7);
    for (int64_t i = begin; i < end; ++i) {
      hits[i].fetch_add(1);
      // A nested loop runs on the calling thread and still covers its range.
      std::atomic<int> inner{0};
      parallelFor(3, 1, [&](int64_t b, int64_t e) { inner += static_cast<int>(e - b); });
      EXPECT_EQ(inner.load(), 3);
    }
  });
  for (const std::atomic<int> &h : hits) {
    EXPECT_EQ(h.load(), 1);
  }
  bool called = false;
  parallelFor(0, 4, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
  EXPECT_GE(parallelThreads(), 1);
}

} // namespace
} // namespace glm::kernels
