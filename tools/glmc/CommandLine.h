// A small strict command-line parser for glmc's subcommands: --flag VALUE, --flag=VALUE, switches.
#pragma once

#include "base/Status.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace glm::tools {

/// Declares what a subcommand accepts, then parses argv against it. Unknown options, missing
/// values and surplus positional arguments are errors that name the subcommand and the option.
class CommandLine {
public:
  explicit CommandLine(std::string command) : command_(std::move(command)) {}

  /// An option taking a value (`--name VALUE` or `--name=VALUE`).
  CommandLine &option(std::string name) {
    valueOptions_.insert(std::move(name));
    return *this;
  }
  /// A switch (`--name`).
  CommandLine &flag(std::string name) {
    flags_.insert(std::move(name));
    return *this;
  }
  /// How many positional arguments are accepted.
  CommandLine &positional(size_t min, size_t max) {
    minPositional_ = min;
    maxPositional_ = max;
    return *this;
  }

  Status parse(const std::vector<std::string> &args);
  /// parse(), printing its error; false means the caller exits with status 2 (usage).
  bool parseOrReport(const std::vector<std::string> &args);
  /// Prints "glmc <command>: <status>" to stderr; returns 1, a failed command's exit status.
  int fail(const Status &status) const;

  bool has(const std::string &name) const {
    return values_.count(name) != 0 || setFlags_.count(name) != 0;
  }
  std::optional<std::string> get(const std::string &name) const;
  /// An integer option; error names the option when the value is not an integer in range.
  Expected<std::optional<int64_t>> getInt(const std::string &name, int64_t min, int64_t max) const;
  const std::vector<std::string> &positionals() const { return positionals_; }

private:
  std::string command_;
  std::set<std::string> valueOptions_;
  std::set<std::string> flags_;
  size_t minPositional_ = 0;
  size_t maxPositional_ = 0;
  std::map<std::string, std::string> values_;
  std::set<std::string> setFlags_;
  std::vector<std::string> positionals_;
};

} // namespace glm::tools
