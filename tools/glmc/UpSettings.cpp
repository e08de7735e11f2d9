// `glmc up`'s settings: the table, the settings file, and the command line > environment > file >
// default precedence.
#include "tools/glmc/UpSettings.h"

#include "tools/glmc/PlanMemory.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char **environ;

namespace glm::tools {

const std::vector<UpSettingSpec> &upSettingSpecs() {
  // value nullptr: a switch (1 when given, or GLMC_X=1).
  static const std::vector<UpSettingSpec> specs = {
      // The two machines.
      {"model", "GLMC_MODEL", "DIR", nullptr,
       "the checkpoint directory on this machine (or the positional MODEL_DIR)"},
      {"worker", "GLMC_WORKER", "[USER@]HOST", nullptr,
       "the worker machine, reached by key-based ssh (rank 1 runs there)"},
      {"worker-model", "GLMC_WORKER_MODEL", "DIR", nullptr,
       "the checkpoint directory on the worker (default: the same path as here)"},
      {"worker-glmc", "GLMC_WORKER_GLMC", "PATH", nullptr,
       "glmc on the worker (default: the same path as this glmc)"},
      {"worker-run-dir", "GLMC_WORKER_RUN_DIR", "DIR", ".local/state/glmc/up",
       "the worker's run directory (its log, pid, plan and secret); relative to\nthe worker's "
       "home"},
      {"ssh-options", "GLMC_SSH_OPTIONS", "OPTIONS", "",
       "extra ssh options, split at spaces (e.g. \"-p 2222 -i ~/.ssh/spark\")"},
      {"head-address", "GLMC_HEAD_ADDRESS", "ADDRESS", nullptr,
       "the address the worker reaches this machine at, where rank 0 takes\nworkers (default: "
       "this machine's address on its route to the worker)"},
      // The API.
      {"host", "GLMC_HOST", "H", "127.0.0.1", "the API's listening address"},
      {"port", "GLMC_PORT", "P", "8888", "the API's port"},
      {"tp-port", "GLMC_TP_PORT", "P", "29551", "the port rank 0 takes workers on"},
      {"served-name", "GLMC_SERVED_NAME", "NAME", nullptr,
       "the model name /v1/models reports (default: the checkpoint directory's\nname)"},
      {"api-key", "GLMC_API_KEY", "K", nullptr,
       "require `Authorization: Bearer K` on the API (the smoke request sends it)"},
      // The plan.
      {"target", "GLMC_TARGET", "T", "sm_121a", "the plan's target: sm_121a (GB10), sm_90a, cpu"},
      {"tp", "GLMC_TP", "N", "2", "tensor-parallel ranks (2: this machine and the worker)"},
      {"precision", "GLMC_PRECISION", "f32|bf16", nullptr,
       "activation precision (default: glmc compile's for the target)"},
      {"max-seqs", "GLMC_MAX_SEQS", "N", nullptr, "sequences served at once (default: compile's)"},
      {"max-context", "GLMC_MAX_CONTEXT", "N", nullptr,
       "each request's window in tokens (default: compile's); one that does not\nfit is "
       "refused with the largest that does"},
      {"pool-tokens", "GLMC_POOL_TOKENS", "N", nullptr,
       "tokens of state all sequences share (default: compile's, on a GPU as\nmany as the "
       "target's memory holds); one that does not fit is refused with\nthe largest that does"},
      {"kv", "GLMC_KV", "bf16|fp8", nullptr, "the sparse-attention latent cache's element type"},
      {"dense", "GLMC_DENSE", "bf16|q4|fp8", nullptr, "the dense weights' encoding"},
      {"lm-head", "GLMC_LM_HEAD", "bf16|q4|fp8", nullptr, "the output head's encoding"},
      {"cache-dir", "GLMC_CACHE_DIR", "DIR", "~/.cache/glmc",
       "compiled plans, by a hash of the checkpoint's config, index and\nsafetensors headers and "
       "the compile options (plans/<hash>.glmp)"},
      // Checks.
      {"memory-reserve", "GLMC_MEMORY_RESERVE", "SIZE", nullptr,
       "memory to leave free on each machine beside its ranks once they run\n(default 4G for "
       "sm_121a, 1G otherwise)"},
      {"checkpoint-hash", "GLMC_CHECKPOINT_HASH", "sampled|full", "sampled",
       "how the worker's checkpoint is compared with this one: every file's size\nand a hash "
       "of its headers and 16 spread 64 KiB blocks (sampled), or of every\nbyte (full, "
       "cached by size and mtime); the ranks' join compares the bytes\nthey load either way"},
      // Tensor parallelism.
      {"tp-transport", "GLMC_TP_TRANSPORT", "nccl|tcp", "nccl",
       "how a GPU plan's ranks exchange (glmc serve --tp-transport)"},
      {"tp-timeout", "GLMC_TP_TIMEOUT", "S", nullptr,
       "glmc serve/worker --tp-timeout (default 30)"},
      {"tp-hello-timeout", "GLMC_TP_HELLO_TIMEOUT", "S", nullptr,
       "glmc serve/worker --tp-hello-timeout (default 5)"},
      {"nccl-socket-ifname", "NCCL_SOCKET_IFNAME", "IFACES", nullptr,
       "NCCL's bootstrap interface on both ranks (e.g. enp1s0f0np0); one that is\nloopback "
       "is refused for a two-machine run"},
      {"nccl-ib-hca", "NCCL_IB_HCA", "HCAS", nullptr,
       "NCCL's RoCE devices on both ranks (e.g. rocep1s0f0,roceP2p1s0f0)"},
      // The launcher.
      {"run-dir", "GLMC_RUN_DIR", "DIR", "~/.local/state/glmc/up",
       "this machine's run directory: state (up.json), rank 0's log and pid"},
      {"wait-timeout", "GLMC_WAIT_TIMEOUT", "S", "1800",
       "seconds to wait for both ranks to load and join"},
      {"stop-timeout", "GLMC_STOP_TIMEOUT", "S", "60",
       "seconds a rank may take to stop after SIGTERM before SIGKILL"},
      {"smoke-tokens", "GLMC_SMOKE_TOKENS", "N", "8", "tokens the smoke request asks for"},
      {"foreground", "GLMC_FOREGROUND", nullptr, "0",
       "stay attached (for a systemd unit): relay rank 0's log, stop the other\nrank when one "
       "ends, exit with the server's code"},
  };
  return specs;
}

const char *settingSourceName(SettingSource source) {
  switch (source) {
  case SettingSource::CommandLine:
    return "command line";
  case SettingSource::Environment:
    return "environment";
  case SettingSource::File:
    return "settings file";
  case SettingSource::Default:
    return "default";
  case SettingSource::Unset:
    return "unset";
  }
  return "unset";
}

namespace {

const UpSettingSpec *specByOption(const std::string &option) {
  for (const UpSettingSpec &s : upSettingSpecs()) {
    if (option == s.option) {
      return &s;
    }
  }
  return nullptr;
}

const UpSettingSpec *specByEnv(const std::string &env) {
  for (const UpSettingSpec &s : upSettingSpecs()) {
    if (env == s.env) {
      return &s;
    }
  }
  return nullptr;
}

bool isRankVariable(const std::string &key) {
  return key.rfind("NCCL_", 0) == 0 || (key.rfind("GLM_", 0) == 0);
}

bool validKey(const std::string &key) {
  if (key.empty() || std::isdigit(static_cast<unsigned char>(key[0]))) {
    return false;
  }
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

std::string trim(const std::string &s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) {
    return "";
  }
  const size_t end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

std::string expandHome(const std::string &path,
                       const std::map<std::string, std::string> &environment) {
  if (path.rfind("~/", 0) != 0) {
    return path;
  }
  auto home = environment.find("HOME");
  return (home != environment.end() ? home->second : std::string("/root")) + path.substr(1);
}

} // namespace

Expected<std::map<std::string, std::string>> parseUpEnvFile(const std::string &text,
                                                            const std::string &source) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  std::string raw;
  int lineNumber = 0;
  while (std::getline(in, raw)) {
    ++lineNumber;
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#') {
      continue;
    }
    if (line.rfind("export ", 0) == 0) {
      line = trim(line.substr(7));
    }
    const size_t eq = line.find('=');
    const std::string where = strCat(source, ":", lineNumber);
    if (eq == std::string::npos) {
      return invalidArgument(where, ": expected KEY=VALUE, got '", line, "'");
    }
    const std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (!validKey(key)) {
      return invalidArgument(where, ": '", key, "' is not a variable name");
    }
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'')) {
      if (value.back() != value.front()) {
        return invalidArgument(where, ": ", key, "'s value opens a quote it does not close");
      }
      value = value.substr(1, value.size() - 2);
    } else if (const size_t hash = value.find(" #"); hash != std::string::npos) {
      value = trim(value.substr(0, hash)); // a comment after an unquoted value
    }
    if (specByEnv(key) == nullptr && !isRankVariable(key)) {
      return invalidArgument(where, ": unknown setting ", key,
                             " (glmc up --help lists the settings; NCCL_* and GLM_* variables "
                             "go to both ranks)");
    }
    if (values.count(key) != 0) {
      return invalidArgument(where, ": ", key, " is set twice");
    }
    values[key] = value;
  }
  return values;
}

void UpSettings::declareOptions(CommandLine &cl) {
  cl.option("env-file", "FILE",
            strCat("the settings file (env GLMC_ENV_FILE, default ./", kDefaultUpEnvFile,
                   "): KEY=VALUE\nlines of the names below; the environment overrides it, the "
                   "command line\nboth"));
  for (const UpSettingSpec &s : upSettingSpecs()) {
    std::string help = strCat(s.help, "\n[", s.env);
    if (s.defaultValue != nullptr && *s.defaultValue != '\0') {
      help += strCat(", default ", s.defaultValue);
    }
    help += "]";
    if (s.value == nullptr) {
      cl.flag(s.option, help);
    } else {
      cl.option(s.option, s.value, help);
    }
  }
}

std::map<std::string, std::string> UpSettings::processEnvironment() {
  std::map<std::string, std::string> env;
  for (char **e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) {
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  return env;
}

Expected<UpSettings> UpSettings::resolve(const CommandLine &cl,
                                         const std::map<std::string, std::string> &environment) {
  UpSettings settings;
  // A typo in a GLMC_ name would otherwise be a setting silently left at its default.
  for (const auto &[key, value] : environment) {
    if (key.rfind("GLMC_", 0) == 0 && key != "GLMC_ENV_FILE" && specByEnv(key) == nullptr) {
      return invalidArgument("unknown setting ", key,
                             " in the environment (glmc up --help lists the settings)");
    }
  }
  std::string file = kDefaultUpEnvFile;
  bool explicitFile = false;
  if (std::optional<std::string> f = cl.get("env-file")) {
    file = *f;
    explicitFile = true;
  } else if (auto it = environment.find("GLMC_ENV_FILE"); it != environment.end()) {
    file = it->second;
    explicitFile = true;
  }
  std::map<std::string, std::string> fileValues;
  std::ifstream in(file);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    Expected<std::map<std::string, std::string>> parsed = parseUpEnvFile(text.str(), file);
    if (!parsed.ok()) {
      return parsed.status();
    }
    fileValues = std::move(parsed).value();
    settings.envFile_ = file;
  } else if (explicitFile) {
    return notFound("the settings file ", file, " (--env-file / GLMC_ENV_FILE) cannot be read");
  }
  for (const UpSettingSpec &s : upSettingSpecs()) {
    Value v;
    if (s.value == nullptr ? cl.has(s.option) : cl.get(s.option).has_value()) {
      v = {s.value == nullptr ? "1" : *cl.get(s.option), SettingSource::CommandLine};
    } else if (auto e = environment.find(s.env); e != environment.end()) {
      v = {e->second, SettingSource::Environment};
    } else if (auto f = fileValues.find(s.env); f != fileValues.end()) {
      v = {f->second, SettingSource::File};
    } else if (s.defaultValue != nullptr) {
      v = {s.defaultValue, SettingSource::Default};
    }
    if (s.value == nullptr && v.source != SettingSource::Unset && v.text != "0" && v.text != "1") {
      return invalidArgument(describe(s.option), " is 0 or 1, got '", v.text, "'");
    }
    v.text = expandHome(v.text, environment);
    settings.values_[s.option] = v;
  }
  for (const auto &[key, value] : fileValues) {
    if (isRankVariable(key) && specByEnv(key) == nullptr) {
      settings.rankEnvironment_[key] = value;
    }
  }
  for (const auto &[key, value] : environment) {
    if (isRankVariable(key) && specByEnv(key) == nullptr) {
      settings.rankEnvironment_[key] = value;
    }
  }
  return settings;
}

std::string UpSettings::get(const std::string &option) const {
  auto it = values_.find(option);
  return it == values_.end() ? "" : it->second.text;
}

bool UpSettings::isSet(const std::string &option) const {
  auto it = values_.find(option);
  return it != values_.end() && it->second.source != SettingSource::Unset;
}

SettingSource UpSettings::source(const std::string &option) const {
  auto it = values_.find(option);
  return it == values_.end() ? SettingSource::Unset : it->second.source;
}

void UpSettings::set(const std::string &option, std::string value, SettingSource source) {
  values_[option] = {std::move(value), source};
}

std::string UpSettings::describe(const std::string &option) {
  const UpSettingSpec *spec = specByOption(option);
  return spec ? strCat("--", option, " (", spec->env, ")") : strCat("--", option);
}

Expected<int64_t> UpSettings::getInt(const std::string &option, int64_t min, int64_t max) const {
  const std::string text = get(option);
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return invalidArgument(describe(option), " must be an integer, got '", text, "' (from the ",
                           settingSourceName(source(option)), ")");
  }
  if (value < min || value > max) {
    return invalidArgument(describe(option), " must be between ", min, " and ", max, ", got ",
                           value, " (from the ", settingSourceName(source(option)), ")");
  }
  return value;
}

Expected<std::optional<uint64_t>> UpSettings::getSize(const std::string &option) const {
  if (!isSet(option)) {
    return std::optional<uint64_t>();
  }
  Expected<uint64_t> size = parseByteSize(get(option));
  if (!size.ok()) {
    return size.status().withContext(describe(option));
  }
  return std::optional<uint64_t>(*size);
}

} // namespace glm::tools
