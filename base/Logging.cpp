// Leveled logging to stderr.
#include "base/Logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace glm {
namespace {

LogLevel levelFromEnvironment() {
  const char *env = std::getenv("GLM_LOG_LEVEL");
  if (env == nullptr) {
    return LogLevel::Info;
  }
  if (std::strcmp(env, "debug") == 0) {
    return LogLevel::Debug;
  }
  if (std::strcmp(env, "warning") == 0) {
    return LogLevel::Warning;
  }
  if (std::strcmp(env, "error") == 0) {
    return LogLevel::Error;
  }
  return LogLevel::Info;
}

std::atomic<int> &threshold() {
  static std::atomic<int> value{static_cast<int>(levelFromEnvironment())};
  return value;
}

const char *levelName(LogLevel level) {
  switch (level) {
  case LogLevel::Debug:
    return "debug";
  case LogLevel::Info:
    return "info";
  case LogLevel::Warning:
    return "warning";
  case LogLevel::Error:
    return "error";
  }
  return "?";
}

} // namespace

LogLevel logThreshold() { return static_cast<LogLevel>(threshold().load()); }

void setLogThreshold(LogLevel level) { threshold().store(static_cast<int>(level)); }

void logMessage(LogLevel level, std::string_view message) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "glmc: %s: %.*s\n", levelName(level), static_cast<int>(message.size()),
               message.data());
}

} // namespace glm
