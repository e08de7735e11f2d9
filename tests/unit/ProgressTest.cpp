// Tests of the progress reporter: bar on a terminal, periodic lines otherwise, final summary.
#include "base/Progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace glm {
namespace {

using namespace std::chrono_literals;

/// A reporter wired to a fake clock and a captured sink, so tests never depend on real time.
struct Harness {
  std::chrono::steady_clock::time_point now{};
  std::vector<std::string> out;

  ProgressReporter::Options options(bool terminal, uint64_t total) {
    ProgressReporter::Options o;
    o.label = "load";
    o.total = total;
    o.unit = ProgressReporter::Unit::Bytes;
    o.terminal = terminal ? 1 : 0;
    o.sink = [this](std::string_view s) { out.emplace_back(s); };
    o.clock = [this] { return now; };
    return o;
  }
};

TEST(Progress, PlainModePrintsALinePerTenPercent) {
  Harness h;
  {
    ProgressReporter p(h.options(false, 1000));
    for (int i = 0; i < 100; ++i) {
      p.advance(10);
    }
    EXPECT_EQ(h.out.size(), 10u);
    EXPECT_EQ(h.out.front(), "load:  10% 100 B / 1.00 KB\n");
    EXPECT_EQ(p.done(), 1000u);
  }
  // The destructor finishes: one summary line.
  ASSERT_EQ(h.out.size(), 11u);
  EXPECT_EQ(h.out.back(), "load: 1.00 KB / 1.00 KB done in 0.0 s\n");
}

TEST(Progress, PlainModeAlsoPrintsOnTheInterval) {
  Harness h;
  ProgressReporter p(h.options(false, 1000000));
  p.advance(1); // under 10%, not yet due
  EXPECT_TRUE(h.out.empty());
  h.now += 6s;
  p.advance(1);
  ASSERT_EQ(h.out.size(), 1u);
  EXPECT_NE(h.out[0].find("2 B / 1.00 MB"), std::string::npos);
  EXPECT_NE(h.out[0].find("B/s"), std::string::npos);
}

TEST(Progress, TerminalModeRedrawsInPlaceAndRateLimits) {
  Harness h;
  ProgressReporter p(h.options(true, 100));
  p.advance(50);
  EXPECT_TRUE(h.out.empty()) << "redraws are limited to one per interval";
  h.now += 200ms;
  p.advance(0);
  ASSERT_EQ(h.out.size(), 1u);
  EXPECT_EQ(h.out[0].rfind("\r\033[K", 0), 0u);
  EXPECT_NE(h.out[0].find("[###############...............]  50%"), std::string::npos);
  EXPECT_EQ(h.out[0].find('\n'), std::string::npos);
  p.finish();
  p.finish();
  ASSERT_EQ(h.out.size(), 3u) << "finish clears the bar and prints one summary, once";
  EXPECT_EQ(h.out[1], "\r\033[K");
  EXPECT_EQ(h.out[2].back(), '\n');
}

TEST(Progress, FormatsAmounts) {
  EXPECT_EQ(ProgressReporter::formatAmount(999, ProgressReporter::Unit::Bytes), "999 B");
  EXPECT_EQ(ProgressReporter::formatAmount(1500, ProgressReporter::Unit::Bytes), "1.50 KB");
  EXPECT_EQ(ProgressReporter::formatAmount(20'800'000'000ull, ProgressReporter::Unit::Bytes),
            "20.80 GB");
  EXPECT_EQ(ProgressReporter::formatAmount(42, ProgressReporter::Unit::Items), "42");
}

} // namespace
} // namespace glm
