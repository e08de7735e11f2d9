// The worker machine as `glmc up` reaches it: key-based ssh (BatchMode, never a prompt), remote
// commands with their output, files sent over ssh's stdin, and a rank started there detached.
#pragma once

#include "base/Status.h"
#include "tools/glmc/UpProcess.h"

#include <map>
#include <string>
#include <vector>

namespace glm::tools {

class Remote {
public:
  /// `destination` is ssh's [user@]host; `options` go before it (e.g. -p 2222 -i KEY).
  Remote(std::string destination, std::vector<std::string> options)
      : destination_(std::move(destination)), options_(std::move(options)) {}

  /// Splits GLMC_SSH_OPTIONS at whitespace (quotes are not interpreted).
  static std::vector<std::string> splitOptions(const std::string &text);

  const std::string &destination() const { return destination_; }
  const std::vector<std::string> &options() const { return options_; }
  /// The host part of the destination (no user@).
  std::string host() const;

  /// ssh's argv running the shell command `command` there.
  std::vector<std::string> argv(const std::string &command) const;

  /// Runs `command` there, `input` on its stdin. An ssh failure (exit 255: no route, refused,
  /// a key not accepted) becomes a message saying how to set ssh up.
  Expected<CommandResult> run(const std::string &command, const std::string &input = "",
                              int timeoutMs = 120000) const;
  /// run(), and a non-zero exit becomes an error with its stderr, headed `what`.
  Expected<std::string> check(const std::string &command, const std::string &what,
                              const std::string &input = "", int timeoutMs = 120000) const;

  /// Writes `bytes` to `path` there (mode 0600), whole or not at all.
  Status sendFile(const std::string &path, const std::string &bytes) const;

  /// Starts argv there in the background (nohup, a session of its own, output appended to
  /// `logPath`, `environment` set) and returns its pid.
  Expected<pid_t> startDetached(const std::vector<std::string> &argv, const std::string &logPath,
                                const std::map<std::string, std::string> &environment) const;

  /// Whether `pid` runs there and its command line contains `needle` (so a reused pid is not
  /// taken for the rank).
  Expected<bool> processRuns(pid_t pid, const std::string &needle) const;
  /// SIGTERM, then SIGKILL after `timeoutS`, if `pid` still runs `needle`.
  Status stopProcess(pid_t pid, const std::string &needle, int timeoutS) const;

private:
  std::string destination_;
  std::vector<std::string> options_;
};

} // namespace glm::tools
