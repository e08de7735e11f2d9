// A small strict command-line parser for glmc's subcommands: --flag VALUE, --flag=VALUE, switches,
// and the --help that lists them (each option is declared with its help, so the list cannot drift
// from what the command accepts).
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
  /// `command` names it in messages ("glmc compile", or a tool's name); `synopsis` follows it in
  /// the usage line ("MODEL_DIR -o PLAN.glmp [options]"); `summary` says what it does.
  CommandLine(std::string command, std::string synopsis, std::string summary)
      : command_(std::move(command)), synopsis_(std::move(synopsis)), summary_(std::move(summary)) {
  }

  /// An option taking a value (`--name VALUE` or `--name=VALUE`), shown as `--name VALUE` and
  /// its help in --help.
  CommandLine &option(std::string name, std::string value, std::string help);
  /// A switch (`--name`).
  CommandLine &flag(std::string name, std::string help);
  /// How many positional arguments are accepted.
  CommandLine &positional(size_t min, size_t max) {
    minPositional_ = min;
    maxPositional_ = max;
    return *this;
  }

  /// Parses `args`; `--help` (or `-h`) anywhere makes helpRequested() true and skips the other
  /// checks, so a user can ask for help with an incomplete command line.
  Status parse(const std::vector<std::string> &args);
  bool helpRequested() const { return help_; }
  /// The usage line, the summary and every option with its help.
  std::string helpText() const;
  /// parse(), then the exit status the caller returns at once: 2 (usage) after printing the
  /// error, 0 after printing the help; nullopt when the command should run.
  std::optional<int> parseOrExit(const std::vector<std::string> &args);
  /// Prints "<command>: <status>" to stderr; returns 1, a failed command's exit status.
  int fail(const Status &status) const;

  bool has(const std::string &name) const {
    return values_.count(name) != 0 || setFlags_.count(name) != 0;
  }
  std::optional<std::string> get(const std::string &name) const;
  /// An integer option; error names the option when the value is not an integer in range.
  Expected<std::optional<int64_t>> getInt(const std::string &name, int64_t min, int64_t max) const;
  const std::vector<std::string> &positionals() const { return positionals_; }

private:
  struct Declared {
    std::string name, value, help; // value empty for a switch
  };

  std::string command_, synopsis_, summary_;
  std::vector<Declared> declared_; // in declaration order, for --help
  std::set<std::string> valueOptions_;
  std::set<std::string> flags_;
  bool help_ = false;
  size_t minPositional_ = 0;
  size_t maxPositional_ = 0;
  std::map<std::string, std::string> values_;
  std::set<std::string> setFlags_;
  std::vector<std::string> positionals_;
};

} // namespace glm::tools
