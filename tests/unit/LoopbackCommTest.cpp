// LoopbackComm's failure handling: a group that ends (a rank giving up, ranks meeting in different
// collectives) fails every waiting and later collective with the reason instead of hanging. Its
// results are tests/unit/TcpCommTest's reference (bit-equality with TCP at 2 and 4 ranks).
#include "runtime/comm/LoopbackComm.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace glm::runtime {
namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(LoopbackComm, SumsInRankOrderOnEveryRank) {
  LoopbackGroup group(3);
  std::vector<std::vector<float>> buffers = {{1.0f, 1e8f}, {2.0f, 1.0f}, {3.0f, -1e8f}};
  std::vector<Status> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<LoopbackComm> comm = group.comm(r);
      results[static_cast<size_t>(r)] = comm->allReduce(buffers[static_cast<size_t>(r)].data(), 2);
    });
  }
  for (std::thread &t : ranks) {
    t.join();
  }
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].toString();
    EXPECT_EQ(buffers[r][0], 6.0f);
    // (1e8 + 1) - 1e8 in float: the 1 is lost in rank order, on every rank alike.
    EXPECT_EQ(buffers[r][1], 0.0f);
  }
}

TEST(LoopbackComm, ARankGivingUpFailsTheOthersCollectives) {
  LoopbackGroup group(3);
  std::unique_ptr<LoopbackComm> quitter = group.comm(2);
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<LoopbackComm> comm = group.comm(r);
      float value = 1.0f;
      // Whether it is already waiting or comes after the abort, it must not wait for rank 2.
      results[static_cast<size_t>(r)] = comm->allReduce(&value, 1);
    });
  }
  quitter->abort(internalError("a kernel launch failed"));
  for (std::thread &t : ranks) {
    t.join();
  }
  for (const Status &s : results) {
    EXPECT_EQ(s.code(), StatusCode::Unavailable);
    EXPECT_TRUE(contains(s.message(), "rank 2 failed: a kernel launch failed")) << s.message();
  }
  // The group stays ended, and every rank says so.
  float value = 1.0f;
  EXPECT_EQ(quitter->allReduce(&value, 1).code(), StatusCode::Unavailable);
  EXPECT_EQ(quitter->missingRanks(), (std::vector<int>{0, 1}));
  EXPECT_FALSE(quitter->complete());
  EXPECT_TRUE(contains(quitter->lastError(), "a kernel launch failed"));
}

TEST(LoopbackComm, RanksInDifferentCollectivesAllFailNamingBoth) {
  LoopbackGroup group(2);
  Status reduced, gathered;
  std::thread rank1([&] {
    std::unique_ptr<LoopbackComm> comm = group.comm(1);
    float piece = 1.0f, out[2];
    gathered = comm->allGather(&piece, out, 1, 1, 1);
  });
  std::unique_ptr<LoopbackComm> comm = group.comm(0);
  std::vector<float> buffer(64, 1.0f);
  reduced = comm->allReduce(buffer.data(), buffer.size());
  rank1.join();
  for (const Status &s : {reduced, gathered}) {
    EXPECT_EQ(s.code(), StatusCode::Unavailable);
    EXPECT_TRUE(contains(s.message(), "ranks out of step: rank 0 called an all-reduce of [64, 1]"))
        << s.message();
    EXPECT_TRUE(contains(s.message(), "rank 1 called an all-gather of [1, 1]")) << s.message();
  }
  EXPECT_EQ(comm->broadcast(buffer.data(), 4).code(), StatusCode::Unavailable);
}

TEST(LoopbackComm, ABroadcastOfAnotherSizeIsOutOfStep) {
  LoopbackGroup group(2);
  Status small, large;
  std::thread rank1([&] {
    std::unique_ptr<LoopbackComm> comm = group.comm(1);
    char buffer[8] = {};
    small = comm->broadcast(buffer, 8);
  });
  std::unique_ptr<LoopbackComm> comm = group.comm(0);
  char buffer[16] = {};
  large = comm->broadcast(buffer, 16);
  rank1.join();
  EXPECT_EQ(small.code(), StatusCode::Unavailable);
  EXPECT_EQ(large.code(), StatusCode::Unavailable);
}

} // namespace
} // namespace glm::runtime
