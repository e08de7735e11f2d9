// Progress bar / periodic progress lines.
#include "base/Progress.h"

#include <cstdio>
#include <unistd.h>

namespace glm {

ProgressReporter::ProgressReporter(Options options) : options_(std::move(options)) {
  if (!options_.sink) {
    options_.sink = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stderr);
      std::fflush(stderr);
    };
  }
  if (options_.terminal < 0) {
    options_.terminal = isatty(STDERR_FILENO) ? 1 : 0;
  }
  if (!options_.clock) {
    options_.clock = [] { return std::chrono::steady_clock::now(); };
  }
  start_ = options_.clock();
  lastReport_ = start_;
}

ProgressReporter::~ProgressReporter() { finish(); }

std::string ProgressReporter::formatAmount(uint64_t amount, Unit unit) {
  if (unit == Unit::Items) {
    return std::to_string(amount);
  }
  static const char *kSuffix[] = {"B", "KB", "MB", "GB", "TB"};
  double value = static_cast<double>(amount);
  int i = 0;
  while (value >= 1000.0 && i < 4) {
    value /= 1000.0;
    ++i;
  }
  char buffer[32];
  if (i == 0) {
    std::snprintf(buffer, sizeof buffer, "%llu B", static_cast<unsigned long long>(amount));
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value, kSuffix[i]);
  }
  return buffer;
}

void ProgressReporter::advance(uint64_t n) {
  done_.fetch_add(n);
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) {
    return;
  }
  const auto now = options_.clock();
  const uint64_t done = std::min(done_.load(), options_.total);
  const int decile = options_.total == 0 ? 10 : static_cast<int>(done * 10 / options_.total);
  if (options_.terminal) {
    if (now - lastReport_ >= options_.redrawInterval) {
      lastReport_ = now;
      report(false);
    }
    return;
  }
  if (decile > lastDecile_ || now - lastReport_ >= options_.lineInterval) {
    lastDecile_ = decile;
    lastReport_ = now;
    report(false);
  }
}

void ProgressReporter::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) {
    return;
  }
  finished_ = true;
  report(true);
}

void ProgressReporter::report(bool final) {
  const uint64_t total = options_.total;
  const uint64_t done = std::min(done_.load(), total == 0 ? done_.load() : total);
  const double seconds = std::chrono::duration<double>(options_.clock() - start_).count();
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  char line[256];
  std::string amounts =
      formatAmount(done, options_.unit) + " / " + formatAmount(total, options_.unit);
  std::string rate;
  if (seconds > 0 && options_.unit == Unit::Bytes) {
    rate = ", " + formatAmount(static_cast<uint64_t>(done / seconds), Unit::Bytes) + "/s";
  }
  if (final) {
    std::snprintf(line, sizeof line, "%s: %s done in %.1f s%s\n", options_.label.c_str(),
                  amounts.c_str(), seconds, rate.c_str());
    if (options_.terminal) {
      // Clear the bar before the final line.
      options_.sink("\r\033[K");
    }
    options_.sink(line);
    return;
  }
  if (options_.terminal) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(filled, '#');
    bar.append(kWidth - filled, '.');
    std::snprintf(line, sizeof line, "\r\033[K%s [%s] %3d%% %s%s", options_.label.c_str(),
                  bar.c_str(), static_cast<int>(fraction * 100), amounts.c_str(), rate.c_str());
  } else {
    std::snprintf(line, sizeof line, "%s: %3d%% %s%s\n", options_.label.c_str(),
                  static_cast<int>(fraction * 100), amounts.c_str(), rate.c_str());
  }
  options_.sink(line);
}

} // namespace glm
