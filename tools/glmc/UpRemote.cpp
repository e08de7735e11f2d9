// The worker over key-based ssh.
#include "tools/glmc/UpRemote.h"

#include <sstream>

namespace glm::tools {

std::vector<std::string> Remote::splitOptions(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    out.push_back(word);
  }
  return out;
}

std::string Remote::host() const {
  const size_t at = destination_.rfind('@');
  return at == std::string::npos ? destination_ : destination_.substr(at + 1);
}

std::vector<std::string> Remote::argv(const std::string &command) const {
  // BatchMode: a missing key fails at once instead of prompting a launcher nobody watches.
  std::vector<std::string> args = {
      "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15"};
  args.insert(args.end(), options_.begin(), options_.end());
  args.push_back(destination_);
  args.push_back(command);
  return args;
}

Expected<CommandResult> Remote::run(const std::string &command, const std::string &input,
                                    int timeoutMs) const {
  Expected<CommandResult> result = runCommand(argv(command), input, timeoutMs);
  if (!result.ok()) {
    return result.status().withContext(strCat("ssh ", destination_));
  }
  if (result->exitCode == 127 && result->err.find("cannot run ssh") != std::string::npos) {
    return Status(StatusCode::Unavailable,
                  "ssh is not installed on this machine: install openssh-client");
  }
  if (result->exitCode == 255) {
    std::string said = result->err;
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) {
      said.pop_back();
    }
    return Status(StatusCode::Unavailable,
                  strCat("cannot ssh to ", destination_, " without a password (ssh said: ", said,
                         "): set up key-based ssh (ssh-copy-id ", destination_,
                         "), or give ssh's options with --ssh-options / GLMC_SSH_OPTIONS"));
  }
  return result;
}

Expected<std::string> Remote::check(const std::string &command, const std::string &what,
                                    const std::string &input, int timeoutMs) const {
  Expected<CommandResult> result = run(command, input, timeoutMs);
  if (!result.ok()) {
    return result.status();
  }
  if (result->exitCode != 0) {
    std::string err = result->err;
    while (!err.empty() && err.back() == '\n') {
      err.pop_back();
    }
    return Status(StatusCode::Unavailable, strCat(what, " on ", destination_, " failed (exit ",
                                                  result->exitCode, "): ", err));
  }
  return result->out;
}

Status Remote::sendFile(const std::string &path, const std::string &bytes) const {
  const std::string tmp = path + ".tmp";
  Expected<std::string> done =
      check(strCat("umask 077 && cat > ", shellQuote(tmp), " && chmod 600 ", shellQuote(tmp),
                   " && mv -f ", shellQuote(tmp), " ", shellQuote(path)),
            strCat("writing ", path), bytes);
  return done.status();
}

Expected<pid_t> Remote::startDetached(const std::vector<std::string> &argv,
                                      const std::string &logPath,
                                      const std::map<std::string, std::string> &environment) const {
  std::string command = "nohup setsid env";
  for (const auto &[key, value] : environment) {
    command += " " + shellQuote(key + "=" + value);
  }
  for (const std::string &a : argv) {
    command += " " + shellQuote(a);
  }
  // Every descriptor redirected, so that ssh returns at once instead of waiting on the rank.
  command += strCat(" >> ", shellQuote(logPath), " 2>&1 < /dev/null & echo $!");
  Expected<std::string> out = check(command, "starting the worker rank");
  if (!out.ok()) {
    return out.status();
  }
  pid_t pid = 0;
  std::istringstream in(*out);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) {
      last = line;
    }
  }
  try {
    pid = static_cast<pid_t>(std::stol(last));
  } catch (...) {
    return Status(StatusCode::Unavailable, strCat("starting the worker rank on ", destination_,
                                                  " printed no process id (got '", *out, "')"));
  }
  return pid;
}

Expected<bool> Remote::processRuns(pid_t pid, const std::string &needle) const {
  Expected<CommandResult> r = run(strCat("tr '\\0' ' ' < /proc/", pid, "/cmdline 2>/dev/null"));
  if (!r.ok()) {
    return r.status();
  }
  return r->exitCode == 0 && r->out.find(needle) != std::string::npos;
}

Status Remote::stopProcess(pid_t pid, const std::string &needle, int timeoutS) const {
  // One round trip: the loop runs there.
  const std::string running = strCat("tr '\\0' ' ' < /proc/", pid,
                                     "/cmdline 2>/dev/null | grep -qF -- ", shellQuote(needle));
  const std::string command =
      strCat(running, " || exit 0; kill -TERM ", pid, "; i=0; while ", running, "; do i=$((i+1)); ",
             "if [ $i -gt ", timeoutS * 10, " ]; then kill -KILL ", pid, "; sleep 0.5; ", running,
             " && exit 1; exit 0; fi; sleep 0.1; done");
  Expected<std::string> out =
      check(command, strCat("stopping rank 1 (pid ", pid, ")"), "", (timeoutS + 30) * 1000);
  return out.status();
}

} // namespace glm::tools
