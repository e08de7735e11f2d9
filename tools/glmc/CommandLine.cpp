// Strict parsing of glmc subcommand (and tool) arguments.
#include "tools/glmc/CommandLine.h"

#include <charconv>
#include <cstdio>

namespace glm::tools {

CommandLine &CommandLine::option(std::string name, std::string value, std::string help) {
  declared_.push_back({name, std::move(value), std::move(help)});
  valueOptions_.insert(std::move(name));
  return *this;
}

CommandLine &CommandLine::flag(std::string name, std::string help) {
  declared_.push_back({name, "", std::move(help)});
  flags_.insert(std::move(name));
  return *this;
}

std::string CommandLine::helpText() const {
  std::string text = strCat("usage: ", command_, " ", synopsis_, "\n\n", summary_, "\n");
  if (declared_.empty()) {
    return text;
  }
  text += "\noptions:\n";
  // Help starts in one column when the names leave room for it, else on the next line.
  constexpr size_t kHelpColumn = 30;
  std::vector<Declared> listed = declared_;
  listed.push_back({"help", "", "this text"});
  for (const Declared &d : listed) {
    std::string name = d.name == "output" ? "-o, --output"
                       : d.name == "help" ? "-h, --help"
                                          : "--" + d.name;
    if (!d.value.empty()) {
      name += " " + d.value;
    }
    std::string line = "  " + name;
    if (line.size() + 2 <= kHelpColumn) {
      line.append(kHelpColumn - line.size(), ' ');
    } else {
      line += "\n" + std::string(kHelpColumn, ' ');
    }
    // Continuation lines of a long help keep its column.
    for (char c : d.help) {
      line += c;
      if (c == '\n') {
        line.append(kHelpColumn, ' ');
      }
    }
    text += line + "\n";
  }
  return text;
}

std::optional<int> CommandLine::parseOrExit(const std::vector<std::string> &args) {
  Status s = parse(args);
  if (help_) {
    std::fputs(helpText().c_str(), stdout);
    return 0;
  }
  if (!s.ok()) {
    // The message already names the command and the option.
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  return std::nullopt;
}

int CommandLine::fail(const Status &status) const {
  std::fprintf(stderr, "%s: %s\n", command_.c_str(), status.toString().c_str());
  return 1;
}

Status CommandLine::parse(const std::vector<std::string> &args) {
  for (const std::string &arg : args) {
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return Status::success();
    }
  }
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
          return invalidArgument(command_, ": option --", name, " takes no value");
        }
        setFlags_.insert(name);
        continue;
      }
      if (valueOptions_.count(name) == 0) {
        return invalidArgument(command_, ": unknown option --", name, " (see ", command_,
                               " --help)");
      }
      if (values_.count(name) != 0) {
        return invalidArgument(command_, ": option --", name, " given twice");
      }
      if (inlineValue) {
        values_[name] = *inlineValue;
      } else if (i + 1 < args.size()) {
        values_[name] = args[++i];
      } else {
        return invalidArgument(command_, ": option --", name, " needs a value");
      }
      continue;
    }
    if (arg == "-o") {
      // -o is the one short option glmc has (DESIGN.md §8): an alias of --output.
      if (valueOptions_.count("output") == 0) {
        return invalidArgument(command_, ": unknown option -o");
      }
      if (i + 1 >= args.size()) {
        return invalidArgument(command_, ": option -o needs a value");
      }
      if (values_.count("output") != 0) {
        return invalidArgument(command_, ": output given twice");
      }
      values_["output"] = args[++i];
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      return invalidArgument(command_, ": unknown option ", arg);
    }
    positionals_.push_back(arg);
  }
  if (positionals_.size() < minPositional_) {
    return invalidArgument(command_, ": missing argument (usage: ", command_, " ", synopsis_, ")");
  }
  if (positionals_.size() > maxPositional_) {
    return invalidArgument(command_, ": unexpected argument '", positionals_[maxPositional_], "'");
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
    return invalidArgument(command_, ": --", name, " must be an integer, got '", *text, "'");
  }
  if (value < min || value > max) {
    return invalidArgument(command_, ": --", name, " must be between ", min, " and ", max, ", got ",
                           value);
  }
  return std::optional<int64_t>(value);
}

} // namespace glm::tools
