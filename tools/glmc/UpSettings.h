// `glmc up`'s settings in one place: each has a command-line option, an environment name and a
// default, and is read from the command line, then the environment, then the settings file
// (./glmc-up.env, KEY=VALUE lines), then the default. NCCL_* and GLM_* variables found in the
// environment or the file go to both ranks as they are.
#pragma once

#include "base/Status.h"
#include "tools/glmc/CommandLine.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace glm::tools {

/// One setting: `--option VALUE` on the command line, `env` in the environment and the file.
struct UpSettingSpec {
  const char *option;
  const char *env;
  const char *value;        // the value's shape in --help ("HOST", "N", "SIZE")
  const char *defaultValue; // nullptr: no default (required, or unset)
  const char *help;
};

/// Every setting, in the order --help lists them.
const std::vector<UpSettingSpec> &upSettingSpecs();

/// Where a setting's value came from.
enum class SettingSource { CommandLine, Environment, File, Default, Unset };
const char *settingSourceName(SettingSource source);

/// The settings file read when neither --env-file nor GLMC_ENV_FILE names one.
inline constexpr const char *kDefaultUpEnvFile = "glmc-up.env";

/// Parses a settings file: KEY=VALUE lines, `#` comments and blank lines, an optional `export `
/// prefix, values optionally in single or double quotes. Keys must be GLMC_* settings, or NCCL_*
/// or GLM_* variables for the ranks; anything else is refused with its line number.
Expected<std::map<std::string, std::string>> parseUpEnvFile(const std::string &text,
                                                            const std::string &source);

class UpSettings {
public:
  /// Declares every setting's option (help: what it is, its env name, its default) on `cl`.
  static void declareOptions(CommandLine &cl);

  /// Resolves every setting: `cl` (parsed), then `environment`, then the settings file, then the
  /// defaults. The file is --env-file, else GLMC_ENV_FILE, else ./glmc-up.env; only a file named
  /// explicitly must exist. Unknown GLMC_* names in the environment or the file are refused.
  static Expected<UpSettings> resolve(const CommandLine &cl,
                                      const std::map<std::string, std::string> &environment);

  /// The process environment as a map.
  static std::map<std::string, std::string> processEnvironment();

  /// A setting's value ("" when unset and without a default). `option` must be declared.
  std::string get(const std::string &option) const;
  bool isSet(const std::string &option) const;
  SettingSource source(const std::string &option) const;
  /// An integer setting, the error naming the option and its env name.
  Expected<int64_t> getInt(const std::string &option, int64_t min, int64_t max) const;
  /// A size setting ("8G"); nullopt when unset.
  Expected<std::optional<uint64_t>> getSize(const std::string &option) const;
  void set(const std::string &option, std::string value, SettingSource source);

  /// NCCL_* and GLM_* variables for both ranks (the environment over the file).
  const std::map<std::string, std::string> &rankEnvironment() const { return rankEnvironment_; }
  /// The settings file read, if any.
  const std::string &envFile() const { return envFile_; }
  /// "--max-context (GLMC_MAX_CONTEXT)": how messages name a setting.
  static std::string describe(const std::string &option);

private:
  struct Value {
    std::string text;
    SettingSource source = SettingSource::Unset;
  };
  std::map<std::string, Value> values_;
  std::map<std::string, std::string> rankEnvironment_;
  std::string envFile_;
};

} // namespace glm::tools
