// Tests of ReasoningSplitter: reasoning / content split at <think> / </think>, in any pieces.
#include "server/openai/ReasoningSplitter.h"

#include "base/Random.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace glm::server {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
};

void append(Split &total, const ReasoningSplitter::Delta &d) {
  total.reasoning += d.reasoning;
  total.content += d.content;
}

/// Feeds `pieces` and finishes. Unless `mayRejoin` (the text around a dropped stray marker, as in
/// "<<think>think>", can itself spell one), no marker may appear in the output, whichever piece
/// boundary it straddled.
Split run(bool startsInReasoning, const std::vector<std::string_view> &pieces,
          bool mayRejoin = false) {
  ReasoningSplitter splitter(startsInReasoning);
  Split total;
  for (std::string_view piece : pieces) {
    append(total, splitter.feed(piece));
  }
  append(total, splitter.finish());
  if (!mayRejoin) {
    for (std::string_view marker : {"<think>", "</think>"}) {
      EXPECT_EQ(total.reasoning.find(marker), std::string::npos) << total.reasoning;
      EXPECT_EQ(total.content.find(marker), std::string::npos) << total.content;
    }
  }
  return total;
}

Split runWhole(bool startsInReasoning, std::string_view text) {
  return run(startsInReasoning, {text});
}

/// `text` cut at the given ascending positions.
std::vector<std::string_view> cut(std::string_view text, const std::vector<size_t> &at) {
  std::vector<std::string_view> pieces;
  size_t from = 0;
  for (size_t pos : at) {
    pieces.push_back(text.substr(from, pos - from));
    from = pos;
  }
  pieces.push_back(text.substr(from));
  return pieces;
}

// Replies that exercise every marker situation; the expected split of each is checked below.
const std::vector<std::string> kReplies = {
    "Let me think.</think>The answer is 4.",    "a<b</thi</think>c<thinking>d</think>e",
    "r1</think>c1<think>r2</think>c2<think>r3", "<<<</</think><<think><</thinking></thinkXYZ<",
    "no markers at all <t </ </thin",           "思考中…</think>答え: 🎉",
    "</think></think><think><think>",           "",
};

TEST(ReasoningSplitter, ReasoningThenContent) {
  Split s = runWhole(true, "Let me think.</think>The answer is 4.");
  EXPECT_EQ(s.reasoning, "Let me think.");
  EXPECT_EQ(s.content, "The answer is 4.");
}

TEST(ReasoningSplitter, UnterminatedReasoningStaysReasoning) {
  Split s = runWhole(true, "still thinking when the budget ran out");
  EXPECT_EQ(s.reasoning, "still thinking when the budget ran out");
  EXPECT_EQ(s.content, "");
}

TEST(ReasoningSplitter, StartingOutOfReasoningIsAllContent) {
  Split s = runWhole(false, "Just the answer.");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Just the answer.");
}

TEST(ReasoningSplitter, ThinkInContentReentersReasoning) {
  Split s = runWhole(true, "r1</think>c1<think>r2</think>c2");
  EXPECT_EQ(s.reasoning, "r1r2");
  EXPECT_EQ(s.content, "c1c2");
  s = runWhole(false, "c1<think>r1</think>c2");
  EXPECT_EQ(s.reasoning, "r1");
  EXPECT_EQ(s.content, "c1c2");
}

TEST(ReasoningSplitter, StrayMarkersAreDroppedAndChangeNothing) {
  Split s = runWhole(true, "a<think>b</think>c</think>d");
  EXPECT_EQ(s.reasoning, "ab");
  EXPECT_EQ(s.content, "cd");
}

TEST(ReasoningSplitter, TextAroundADroppedStrayMarkerIsKeptAsWritten) {
  // The model wrote "<", a stray "<think>", then "think>": the text is kept byte for byte, even
  // though it now reads like a marker.
  Split s = run(true, {"<<think>think>"}, /*mayRejoin=*/true);
  EXPECT_EQ(s.reasoning, "<think>");
  EXPECT_EQ(s.content, "");
}

TEST(ReasoningSplitter, OnlyExactMarkersCount) {
  Split s = runWhole(true, "x</thinking>y</thinkXYZ z<thinking></Think></think >w");
  EXPECT_EQ(s.reasoning, "x</thinking>y</thinkXYZ z<thinking></Think></think >w");
  EXPECT_EQ(s.content, "");
  s = runWhole(false, "<think >a<thinker>b");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "<think >a<thinker>b");
}

TEST(ReasoningSplitter, HoldsBackOnlyAPartialMarker) {
  ReasoningSplitter splitter(true);
  ReasoningSplitter::Delta d = splitter.feed("abc</thi");
  EXPECT_EQ(d.reasoning, "abc");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(splitter.inReasoning());
  d = splitter.feed("nk>def");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "def");
  EXPECT_FALSE(splitter.inReasoning());
  // "<" may start "<think>": held; "<x" cannot: released.
  d = splitter.feed("g<");
  EXPECT_EQ(d.content, "g");
  d = splitter.feed("x");
  EXPECT_EQ(d.content, "<x");
  // Text before the partial marker is not held back with it.
  d = splitter.feed("hello <thin");
  EXPECT_EQ(d.content, "hello ");
  d = splitter.feed("k>why");
  EXPECT_EQ(d.reasoning, "why");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(splitter.inReasoning());
}

TEST(ReasoningSplitter, PartialMarkerThatTurnsOutToBeTextIsReleased) {
  ReasoningSplitter splitter(true);
  EXPECT_EQ(splitter.feed("a</think").reasoning, "a");
  ReasoningSplitter::Delta d = splitter.feed("ing> b");
  EXPECT_EQ(d.reasoning, "</thinking> b");
  EXPECT_TRUE(splitter.inReasoning());
}

TEST(ReasoningSplitter, FinishFlushesHeldBackTextIntoTheCurrentChannel) {
  ReasoningSplitter inReasoning(true);
  EXPECT_EQ(inReasoning.feed("abc</thi").reasoning, "abc");
  ReasoningSplitter::Delta d = inReasoning.finish();
  EXPECT_EQ(d.reasoning, "</thi");
  EXPECT_EQ(d.content, "");

  ReasoningSplitter inContent(true);
  d = inContent.feed("r</think>x<thi");
  EXPECT_EQ(d.reasoning, "r");
  EXPECT_EQ(d.content, "x");
  d = inContent.finish();
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "<thi");

  // Nothing held: finish gives nothing.
  ReasoningSplitter empty(false);
  EXPECT_EQ(empty.feed("abc").content, "abc");
  d = empty.finish();
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningSplitter, EmptyPiecesAreHarmless) {
  Split s = run(true, {"", "a", "", "</", "", "think>", "", "b", ""});
  EXPECT_EQ(s.reasoning, "a");
  EXPECT_EQ(s.content, "b");
}

TEST(ReasoningSplitter, ExpectedSplitsOfTheTestReplies) {
  struct Case {
    bool startsInReasoning;
    std::string reasoning;
    std::string content;
  };
  const std::vector<Case> expected = {
      {true, "Let me think.", "The answer is 4."},
      {true, "a<b</thi", "c<thinking>de"},
      {true, "r1r2r3", "c1c2"},
      {true, "<<<</<</thinking></thinkXYZ<", "<"},
      {true, "no markers at all <t </ </thin", ""},
      {true, "思考中…", "答え: 🎉"},
      {true, "", ""},
      {true, "", ""},
  };
  ASSERT_EQ(expected.size(), kReplies.size());
  for (size_t i = 0; i < kReplies.size(); ++i) {
    Split s = runWhole(expected[i].startsInReasoning, kReplies[i]);
    EXPECT_EQ(s.reasoning, expected[i].reasoning) << kReplies[i];
    EXPECT_EQ(s.content, expected[i].content) << kReplies[i];
  }
}

// Every way of cutting a reply into two or three pieces, and into single bytes, gives what one
// feed gives.
TEST(ReasoningSplitter, EverySplitMatchesOneFeed) {
  for (const std::string &reply : kReplies) {
    for (bool starts : {true, false}) {
      Split whole = runWhole(starts, reply);
      for (size_t i = 0; i <= reply.size(); ++i) {
        for (size_t j = i; j <= reply.size(); ++j) {
          Split s = run(starts, cut(reply, {i, j}));
          ASSERT_EQ(s.reasoning, whole.reasoning) << reply << " cut at " << i << "," << j;
          ASSERT_EQ(s.content, whole.content) << reply << " cut at " << i << "," << j;
        }
      }
      std::vector<size_t> everyByte;
      for (size_t i = 1; i < reply.size(); ++i) {
        everyByte.push_back(i);
      }
      Split bytes = run(starts, cut(reply, everyByte));
      EXPECT_EQ(bytes.reasoning, whole.reasoning) << reply;
      EXPECT_EQ(bytes.content, whole.content) << reply;
    }
  }
}

TEST(ReasoningSplitter, RandomSplitsMatchOneFeed) {
  SplitMix64 rng(42);
  const std::string alphabet[] = {"<think>", "</think>", "<", "</", "<t", "</thi", "think",
                                  ">",       "a",        "b", " ",  "\n", "é",     "</thinking>"};
  for (int round = 0; round < 2000; ++round) {
    std::string reply;
    size_t parts = rng.below(20);
    for (size_t k = 0; k < parts; ++k) {
      reply += alphabet[rng.below(std::size(alphabet))];
    }
    bool starts = rng.chance(50);
    Split whole = run(starts, {reply}, /*mayRejoin=*/true);
    std::vector<size_t> at;
    size_t pos = 0;
    while (!reply.empty()) {
      pos += rng.below(6);
      if (pos >= reply.size()) {
        break;
      }
      at.push_back(pos);
    }
    Split s = run(starts, cut(reply, at), /*mayRejoin=*/true);
    ASSERT_EQ(s.reasoning, whole.reasoning) << reply;
    ASSERT_EQ(s.content, whole.content) << reply;
  }
}

} // namespace
} // namespace glm::server
