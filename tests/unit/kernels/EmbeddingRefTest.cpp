// Tests of the embedding row gathers: bf16 rows widened exactly, copies, bad token ids; the MTP
// head's next-token embedding.
#include "kernels/embedding/embedding.h"
#include "kernels/next_embedding/next_embedding.h"
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

TEST(NextEmbeddingRef, EmbedsTheTokenAfterEachRow) {
  // A table of 6 tokens, 2 wide: row t holds (t, 10 t).
  std::vector<float> table;
  for (int t = 0; t < 6; ++t) {
    table.insert(table.end(), {static_cast<float>(t), 10.0f * t});
  }
  const WeightView view = WeightView::f32(table.data(), {6, 2});
  const std::vector<int32_t> ids = {1, 2, 3};
  std::vector<int32_t> drawn(3 * kSampledIdsWidth, 0); // the draws after each row: 4, 5, 0
  drawn[0] = 4;
  drawn[kSampledIdsWidth] = 5;
  drawn[2 * kSampledIdsWidth] = 0;
  const int32_t positions[] = {7, 8, 9}, fromZero[] = {0, 1, 2};
  std::vector<float> out(6, -1);
  auto run = [&](NextEmbeddingArgs a) {
    a.ids = ids.data();
    a.table = view;
    a.out = out.data();
    a.rows = 3;
    return nextEmbeddingRef(a);
  };
  // A decode window: each row's own draw.
  ASSERT_TRUE(run({.sampled = drawn.data(), .positions = positions}).ok());
  EXPECT_EQ(out, (std::vector<float>{4, 40, 5, 50, 0, 0}));
  // A prefill chunk: the next input tokens, then the last row's draw (held alone or per row) or
  // the token the host says follows the chunk.
  ASSERT_TRUE(run({.sampled = drawn.data() + 2 * kSampledIdsWidth,
                   .sampledLastOnly = true,
                   .positions = positions,
                   .followInput = true})
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{2, 20, 3, 30, 0, 0}));
  ASSERT_TRUE(
      run({.sampled = drawn.data(), .positions = positions, .following = 5, .followInput = true})
          .ok());
  EXPECT_EQ(out, (std::vector<float>{2, 20, 3, 30, 5, 50}));
  // Zeros at position 0, whatever follows it.
  ASSERT_TRUE(run({.sampled = drawn.data(), .positions = fromZero}).ok());
  EXPECT_EQ(out, (std::vector<float>{0, 0, 5, 50, 0, 0}));
  // Refused: a next token outside the table; a last row's draw alone without following the input.
  drawn[kSampledIdsWidth] = 6;
  EXPECT_FALSE(run({.sampled = drawn.data(), .positions = positions}).ok());
  EXPECT_FALSE(
      run({.sampled = drawn.data(), .sampledLastOnly = true, .positions = positions}).ok());
}

} // namespace
} // namespace glm::kernels
