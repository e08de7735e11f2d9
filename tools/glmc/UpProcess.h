// `glmc up`'s process control and run state: starting rank 0 here detached (or as a child for
// --foreground), running commands and capturing their output, reading a log's new lines, stopping
// a rank, and the run directory's state file (pids, ports, logs) under a lock.
#pragma once

#include "base/Status.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace glm::tools {

struct CommandResult {
  int exitCode = 0; // 128 + N when killed by signal N
  std::string out, err;
};

/// Runs argv, feeding `input` on stdin, and waits (at most `timeoutMs`, 0: no bound; past it the
/// command is killed and the result is an error naming it).
Expected<CommandResult> runCommand(const std::vector<std::string> &argv,
                                   const std::string &input = "", int timeoutMs = 0);

/// Starts argv with stdout and stderr appended to `logPath`, stdin /dev/null, `environment` added,
/// in a session of its own (so a terminal's hangup does not reach it). The caller reaps it.
Expected<pid_t> spawnLogged(const std::vector<std::string> &argv, const std::string &logPath,
                            const std::map<std::string, std::string> &environment);

/// Starts argv with its stdout and stderr on a pipe; `fd` is the read end (non-blocking).
struct StreamingChild {
  pid_t pid = -1;
  int fd = -1;
};
Expected<StreamingChild> spawnStreaming(const std::vector<std::string> &argv);

/// Whether `pid` runs (a child of ours that exited is reaped, and its status kept for exitCodeOf).
bool processAlive(pid_t pid);
/// A reaped child's exit code (128 + signal), if processAlive saw it exit.
std::optional<int> exitCodeOf(pid_t pid);
/// /proc/<pid>/cmdline with spaces between arguments ("" when gone).
std::string processCommandLine(pid_t pid);
/// SIGTERM, then SIGKILL after `timeoutS`; success once it is gone.
Status stopLocalProcess(pid_t pid, int timeoutS);

/// Splits bytes into lines as they arrive (a partial last line waits for its end).
class LineBuffer {
public:
  void append(const char *data, size_t size) { pending_.append(data, size); }
  /// The next complete line without its newline, if any.
  std::optional<std::string> next();
  /// Whatever is left (a last line without a newline).
  std::string rest();

private:
  std::string pending_;
};

/// Reads the lines a growing file gets (rank 0's log), from `offset` on.
class FileFollower {
public:
  explicit FileFollower(std::string path, uint64_t offset = 0)
      : path_(std::move(path)), offset_(offset) {}
  /// The complete lines written since the last call.
  std::vector<std::string> poll();

private:
  std::string path_;
  uint64_t offset_;
  LineBuffer buffer_;
};

/// The last `lines` lines of a file ("" when it cannot be read).
std::string lastLines(const std::string &path, int lines);

/// `s` quoted for a POSIX shell (single quotes).
std::string shellQuote(const std::string &s);
/// This glmc's absolute path.
std::string thisExecutable();
/// `bytes` random bytes from /dev/urandom, as hex.
Expected<std::string> randomHex(size_t bytes);
/// Writes `text` to `path` with mode 0600, replacing it whole.
Status writePrivateFile(const std::string &path, const std::string &text);

/// What `glmc up` started, in <run dir>/up.json: enough for status, logs, stop and restart.
struct UpState {
  pid_t headPid = -1;
  std::string headLog;
  std::string workerDestination;
  std::vector<std::string> sshOptions;
  pid_t workerPid = -1;
  std::string workerLog;
  std::string workerPlan; // its command line names it: how a reused pid is told apart
  std::string workerGlmc;
  std::string apiHost; // where this machine reaches the API
  int port = 0;
  int tpPort = 0;
  std::string servedName;
  std::string plan;
  std::string model;
  std::string started; // UTC, ISO 8601
  bool apiKey = false;
};

nlohmann::json toJson(const UpState &state);
Expected<UpState> upStateFromJson(const nlohmann::json &j, const std::string &source);
std::string upStatePath(const std::string &runDir);
/// The state of the last start; nullopt when none is recorded.
Expected<std::optional<UpState>> loadUpState(const std::string &runDir);
Status saveUpState(const std::string &runDir, const UpState &state);
Status removeUpState(const std::string &runDir);

/// An exclusive lock on <run dir>/up.lock while one `glmc up` changes what runs.
class RunLock {
public:
  static Expected<RunLock> acquire(const std::string &runDir);
  RunLock(RunLock &&other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RunLock &operator=(RunLock &&) = delete;
  ~RunLock();

private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

} // namespace glm::tools
