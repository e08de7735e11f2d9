// `glmc up`'s process control and run state.
#include "tools/glmc/UpProcess.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace glm::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::map<pid_t, int> &reaped() {
  static std::map<pid_t, int> codes;
  return codes;
}

int codeOf(int status) {
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  if (WIFSIGNALED(status)) {
    return 128 + WTERMSIG(status);
  }
  return 1;
}

std::vector<char *> cArgv(const std::vector<std::string> &argv) {
  std::vector<char *> out;
  for (const std::string &a : argv) {
    out.push_back(const_cast<char *>(a.c_str()));
  }
  out.push_back(nullptr);
  return out;
}

} // namespace

Expected<CommandResult> runCommand(const std::vector<std::string> &argv, const std::string &input,
                                   int timeoutMs) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return ioError("pipe: ", std::strerror(errno));
  }
  std::vector<char *> args = cArgv(argv);
  const pid_t pid = fork();
  if (pid < 0) {
    return ioError("fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  CommandResult result;
  size_t written = 0;
  if (input.empty()) {
    close(in[1]);
    in[1] = -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  bool outOpen = true, errOpen = true;
  char buffer[65536];
  while (outOpen || errOpen || in[1] >= 0) {
    pollfd fds[3];
    int n = 0;
    if (outOpen) {
      fds[n++] = {out[0], POLLIN, 0};
    }
    if (errOpen) {
      fds[n++] = {err[0], POLLIN, 0};
    }
    if (in[1] >= 0) {
      fds[n++] = {in[1], POLLOUT, 0};
    }
    int wait = 200;
    if (timeoutMs > 0 && std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      for (int fd : {out[0], err[0], in[1]}) {
        if (fd >= 0) {
          close(fd);
        }
      }
      return Status(
          StatusCode::Unavailable,
          strCat("`", strJoin(argv, " "), "` did not finish within ", timeoutMs / 1000, " s"));
    }
    if (poll(fds, n, wait) < 0 && errno != EINTR) {
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) {
        continue;
      }
      if (fds[i].fd == in[1]) {
        const ssize_t w = write(in[1], input.data() + written, input.size() - written);
        if (w > 0) {
          written += static_cast<size_t>(w);
        }
        if (w < 0 && errno != EAGAIN) {
          written = input.size(); // the command stopped reading
        }
        if (written == input.size()) {
          close(in[1]);
          in[1] = -1;
        }
        continue;
      }
      const ssize_t r = read(fds[i].fd, buffer, sizeof buffer);
      if (r > 0) {
        (fds[i].fd == out[0] ? result.out : result.err).append(buffer, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        if (fds[i].fd == out[0]) {
          outOpen = false;
        } else {
          errOpen = false;
        }
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exitCode = codeOf(status);
  return result;
}

Expected<pid_t> spawnLogged(const std::vector<std::string> &argv, const std::string &logPath,
                            const std::map<std::string, std::string> &environment) {
  const int log = open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) {
    return ioError(logPath, ": ", std::strerror(errno));
  }
  std::vector<char *> args = cArgv(argv);
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return ioError("fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    setsid();
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    // The launcher blocks signals around its waits; the server must get them.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (const auto &[key, value] : environment) {
      setenv(key.c_str(), value.c_str(), 1);
    }
    execv(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(log);
  return pid;
}

Expected<StreamingChild> spawnStreaming(const std::vector<std::string> &argv) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return ioError("pipe: ", std::strerror(errno));
  }
  std::vector<char *> args = cArgv(argv);
  const pid_t pid = fork();
  if (pid < 0) {
    return ioError("fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  return StreamingChild{pid, out[0]};
}

bool processAlive(pid_t pid) {
  if (pid <= 0) {
    return false;
  }
  if (reaped().count(pid) != 0) {
    return false;
  }
  int status = 0;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid) {
    reaped()[pid] = codeOf(status);
    return false;
  }
  if (kill(pid, 0) != 0 && errno != EPERM) {
    return false;
  }
  // A zombie someone else has yet to reap has ended all the same.
  std::ifstream stat(strCat("/proc/", pid, "/stat"));
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

std::optional<int> exitCodeOf(pid_t pid) {
  auto it = reaped().find(pid);
  return it == reaped().end() ? std::nullopt : std::optional<int>(it->second);
}

std::string processCommandLine(pid_t pid) {
  std::ifstream in(strCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char &c : text) {
    if (c == '\0') {
      c = ' ';
    }
  }
  while (!text.empty() && text.back() == ' ') {
    text.pop_back();
  }
  return text;
}

Status stopLocalProcess(pid_t pid, int timeoutS) {
  if (!processAlive(pid)) {
    return Status::success();
  }
  kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutS);
  while (processAlive(pid)) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      for (int i = 0; i < 50 && processAlive(pid); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      return processAlive(pid)
                 ? Status(StatusCode::Unavailable, strCat("process ", pid, " survived SIGKILL"))
                 : Status::success();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status::success();
}

std::optional<std::string> LineBuffer::next() {
  const size_t newline = pending_.find('\n');
  if (newline == std::string::npos) {
    return std::nullopt;
  }
  std::string line = pending_.substr(0, newline);
  pending_.erase(0, newline + 1);
  // A progress bar redrawn with \r shows as its latest state.
  if (const size_t cr = line.rfind('\r'); cr != std::string::npos) {
    line = line.substr(cr + 1);
  }
  return line;
}

std::string LineBuffer::rest() {
  std::string text;
  text.swap(pending_);
  return text;
}

std::vector<std::string> FileFollower::poll() {
  std::vector<std::string> lines;
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return lines;
  }
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  if (size < offset_) {
    offset_ = 0; // truncated
  }
  if (size > offset_) {
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string bytes(size - offset_, '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<size_t>(in.gcount()));
    offset_ += bytes.size();
    buffer_.append(bytes.data(), bytes.size());
  }
  while (std::optional<std::string> line = buffer_.next()) {
    lines.push_back(std::move(*line));
  }
  return lines;
}

std::string lastLines(const std::string &path, int lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return "";
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') {
    --pos;
  }
  int seen = 0;
  while (pos > 0) {
    if (text[pos - 1] == '\n' && ++seen == lines) {
      break;
    }
    --pos;
  }
  return text.substr(pos);
}

std::string shellQuote(const std::string &s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789@%+=:,./-_") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string thisExecutable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("glmc") : self.string();
}

Expected<std::string> randomHex(size_t bytes) {
  std::ifstream in("/dev/urandom", std::ios::binary);
  std::string raw(bytes, '\0');
  in.read(raw.data(), static_cast<std::streamsize>(bytes));
  if (static_cast<size_t>(in.gcount()) != bytes) {
    return ioError("/dev/urandom: short read");
  }
  static const char *kHex = "0123456789abcdef";
  std::string text;
  for (unsigned char c : raw) {
    text += kHex[c >> 4];
    text += kHex[c & 15];
  }
  return text;
}

Status writePrivateFile(const std::string &path, const std::string &text) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ioError(tmp, ": ", std::strerror(errno));
  }
  fchmod(fd, 0600);
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return ioError(path, ": write failed");
  }
  return Status::success();
}

Json toJson(const UpState &s) {
  return {{"head_pid", s.headPid},
          {"head_log", s.headLog},
          {"worker", s.workerDestination},
          {"ssh_options", s.sshOptions},
          {"worker_pid", s.workerPid},
          {"worker_log", s.workerLog},
          {"worker_plan", s.workerPlan},
          {"worker_glmc", s.workerGlmc},
          {"api_host", s.apiHost},
          {"port", s.port},
          {"tp_port", s.tpPort},
          {"served_name", s.servedName},
          {"plan", s.plan},
          {"model", s.model},
          {"started", s.started},
          {"api_key", s.apiKey}};
}

Expected<UpState> upStateFromJson(const Json &j, const std::string &source) {
  try {
    UpState s;
    s.headPid = j.at("head_pid").get<pid_t>();
    s.headLog = j.at("head_log").get<std::string>();
    s.workerDestination = j.at("worker").get<std::string>();
    s.sshOptions = j.at("ssh_options").get<std::vector<std::string>>();
    s.workerPid = j.at("worker_pid").get<pid_t>();
    s.workerLog = j.at("worker_log").get<std::string>();
    s.workerPlan = j.at("worker_plan").get<std::string>();
    s.workerGlmc = j.at("worker_glmc").get<std::string>();
    s.apiHost = j.at("api_host").get<std::string>();
    s.port = j.at("port").get<int>();
    s.tpPort = j.at("tp_port").get<int>();
    s.servedName = j.at("served_name").get<std::string>();
    s.plan = j.at("plan").get<std::string>();
    s.model = j.at("model").get<std::string>();
    s.started = j.at("started").get<std::string>();
    s.apiKey = j.at("api_key").get<bool>();
    return s;
  } catch (const Json::exception &e) {
    return formatError(source, ": not a glmc up state file (", e.what(),
                       "): remove it once no rank of it runs");
  }
}

std::string upStatePath(const std::string &runDir) {
  return (fs::path(runDir) / "up.json").string();
}

Expected<std::optional<UpState>> loadUpState(const std::string &runDir) {
  const std::string path = upStatePath(runDir);
  std::ifstream in(path);
  if (!in) {
    return std::optional<UpState>();
  }
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded()) {
    return formatError(path, ": not JSON: remove it once no rank of it runs");
  }
  Expected<UpState> state = upStateFromJson(j, path);
  if (!state.ok()) {
    return state.status();
  }
  return std::optional<UpState>(std::move(state).value());
}

Status saveUpState(const std::string &runDir, const UpState &state) {
  return writePrivateFile(upStatePath(runDir), toJson(state).dump(2) + "\n");
}

Status removeUpState(const std::string &runDir) {
  std::error_code ec;
  fs::remove(upStatePath(runDir), ec);
  return ec ? ioError(upStatePath(runDir), ": ", ec.message()) : Status::success();
}

Expected<RunLock> RunLock::acquire(const std::string &runDir) {
  std::error_code ec;
  fs::create_directories(runDir, ec);
  if (ec) {
    return ioError("cannot create the run directory ", runDir, ": ", ec.message(),
                   " (--run-dir / GLMC_RUN_DIR)");
  }
  const std::string path = (fs::path(runDir) / "up.lock").string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ioError(path, ": ", std::strerror(errno));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return Status(StatusCode::Unavailable,
                  strCat("another `glmc up` is changing what runs from ", runDir, " (it holds ",
                         path, "): wait for it to finish"));
  }
  return RunLock(fd);
}

RunLock::~RunLock() {
  if (fd_ >= 0) {
    close(fd_);
  }
}

} // namespace glm::tools
