// Tests of the embedding row gather: bf16 rows widened exactly, copies, bad token ids.
#include "kernels/embedding/embedding.h"
#include "tests/unit/kernels/RandomData.h"

#include <gtest/gtest.h>

namespace glm::kernels {
namespace {

TEST(EmbeddingRef, GathersRowsIntoEveryCopy) {
  SplitMix64 rng(1);
  const int64_t vocab = 7, hidden = 5, copies = 3;
  const std::vector<float> table = bf16Rounded(randomFloats(rng, vocab * hidden));
  const std::vector<uint16_t> stored = toBf16(table);
  const std::vector<int32_t> ids = {6, 0, 6, 3};
  std::vector<float> out(ids.size() * copies * hidden, -1.0f);
  ASSERT_TRUE(embeddingRef({.tokenIds = ids.data(),
                            .table = WeightView::raw(stored.data(), DType::BF16, {vocab, hidden}),
                            .out = out.data(),
                            .tokens = 4,
                            .copies = copies})
                  .ok());
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t c = 0; c < copies; ++c) {
      for (int64_t d = 0; d < hidden; ++d) {
        EXPECT_EQ(out[(t * copies + c) * hidden + d], table[ids[t] * hidden + d]);
      }
    }
  }
}

TEST(EmbeddingRef, RejectsTokenIdsOutsideTheVocabulary) {
  const std::vector<float> table(6, 1.0f);
  std::vector<float> out(3);
  for (int32_t bad : {-1, 2}) {
    const int32_t id = bad;
    const Status s = embeddingRef({.tokenIds = &id,
                                   .table = WeightView::f32(table.data(), {2, 3}),
                                   .out = out.data(),
                                   .tokens = 1});
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("outside [0, 2)"), std::string::npos) << s.message();
  }
}

} // namespace
} // namespace glm::kernels
