// Leveled logging to stderr; GLM_LOG_LEVEL=debug|info|warning|error chooses what is shown.
#pragma once

#include "base/Status.h"

#include <string_view>

namespace glm {

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3 };

/// The level below which messages are dropped; read once from GLM_LOG_LEVEL (default info).
LogLevel logThreshold();
void setLogThreshold(LogLevel level);

/// Writes one line "glmc: <level>: <message>" to stderr; safe from several threads.
void logMessage(LogLevel level, std::string_view message);

template <typename... Args> void logDebug(Args &&...args) {
  if (logThreshold() <= LogLevel::Debug) {
    logMessage(LogLevel::Debug, strCat(std::forward<Args>(args)...));
  }
}
template <typename... Args> void logInfo(Args &&...args) {
  if (logThreshold() <= LogLevel::Info) {
    logMessage(LogLevel::Info, strCat(std::forward<Args>(args)...));
  }
}
template <typename... Args> void logWarning(Args &&...args) {
  if (logThreshold() <= LogLevel::Warning) {
    logMessage(LogLevel::Warning, strCat(std::forward<Args>(args)...));
  }
}
template <typename... Args> void logError(Args &&...args) {
  logMessage(LogLevel::Error, strCat(std::forward<Args>(args)...));
}

} // namespace glm
