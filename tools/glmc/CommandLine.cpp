// Strict parsing of glmc subcommand arguments.
#include "tools/glmc/CommandLine.h"

#include <charconv>
#include <cstdio>

namespace glm::tools {

bool CommandLine::parseOrReport(const std::vector<std::string> &args) {
  Status s = parse(args);
  if (!s.ok()) {
    // The message already names the command and the option.
    std::fprintf(stderr, "%s\n", s.message().c_str());
  }
  return s.ok();
}

int CommandLine::fail(const Status &status) const {
  std::fprintf(stderr, "glmc %s: %s\n", command_.c_str(), status.toString().c_str());
  return 1;
}

Status CommandLine::parse(const std::vector<std::string> &args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2);
      std::optional<std::string> inlineValue;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        inlineValue = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (flags_.count(name) != 0) {
        if (inlineValue) {
          return invalidArgument("glmc ", command_, ": option --", name, " takes no value");
        }
        setFlags_.insert(name);
        continue;
      }
      if (valueOptions_.count(name) == 0) {
        return invalidArgument("glmc ", command_, ": unknown option --", name);
      }
      if (values_.count(name) != 0) {
        return invalidArgument("glmc ", command_, ": option --", name, " given twice");
      }
      if (inlineValue) {
        values_[name] = *inlineValue;
      } else if (i + 1 < args.size()) {
        values_[name] = args[++i];
      } else {
        return invalidArgument("glmc ", command_, ": option --", name, " needs a value");
      }
      continue;
    }
    if (arg == "-o") {
      // -o is the one short option glmc has (DESIGN.md §8): an alias of --output.
      if (valueOptions_.count("output") == 0) {
        return invalidArgument("glmc ", command_, ": unknown option -o");
      }
      if (i + 1 >= args.size()) {
        return invalidArgument("glmc ", command_, ": option -o needs a value");
      }
      if (values_.count("output") != 0) {
        return invalidArgument("glmc ", command_, ": output given twice");
      }
      values_["output"] = args[++i];
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      return invalidArgument("glmc ", command_, ": unknown option ", arg);
    }
    positionals_.push_back(arg);
  }
  if (positionals_.size() < minPositional_) {
    return invalidArgument("glmc ", command_, ": missing argument (see glmc --help)");
  }
  if (positionals_.size() > maxPositional_) {
    return invalidArgument("glmc ", command_, ": unexpected argument '",
                           positionals_[maxPositional_], "'");
  }
  return Status::success();
}

std::optional<std::string> CommandLine::get(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    return std::nullopt;
  }
  return it->second;
}

Expected<std::optional<int64_t>> CommandLine::getInt(const std::string &name, int64_t min,
                                                     int64_t max) const {
  std::optional<std::string> text = get(name);
  if (!text) {
    return std::optional<int64_t>();
  }
  int64_t value = 0;
  const char *end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end) {
    return invalidArgument("glmc ", command_, ": --", name, " must be an integer, got '", *text,
                           "'");
  }
  if (value < min || value > max) {
    return invalidArgument("glmc ", command_, ": --", name, " must be between ", min, " and ", max,
                           ", got ", value);
  }
  return std::optional<int64_t>(value);
}

} // namespace glm::tools
