// Progress of long operations: a redrawn bar on a terminal, periodic plain lines otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace glm {

class ProgressReporter {
public:
  enum class Unit { Items, Bytes };
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  using Sink = std::function<void(std::string_view)>;

  struct Options {
    std::string label;
    uint64_t total = 0;
    Unit unit = Unit::Items;
    /// Where text goes; default: stderr.
    Sink sink;
    /// Whether the sink is a terminal (bar redrawn in place); default: isatty(stderr).
    int terminal = -1;
    /// Time source; default: steady_clock::now. Tests inject their own.
    Clock clock;
    /// Plain mode prints a line at most this often (and at every 10% step).
    std::chrono::milliseconds lineInterval{5000};
    /// Terminal mode redraws at most this often.
    std::chrono::milliseconds redrawInterval{100};
  };

  explicit ProgressReporter(Options options);
  /// Calls finish() if nobody did.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter &) = delete;
  ProgressReporter &operator=(const ProgressReporter &) = delete;

  /// Adds `n` units of work done; safe from several threads.
  void advance(uint64_t n);
  /// Prints the final state ("done in 3.2 s") once.
  void finish();

  uint64_t done() const { return done_.load(); }

  /// "1.50 GB", "512 B", "12" for items: how amounts are shown.
  static std::string formatAmount(uint64_t amount, Unit unit);

private:
  void report(bool final);

  Options options_;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastReport_;
  int lastDecile_ = 0;
  bool finished_ = false;
};

} // namespace glm
