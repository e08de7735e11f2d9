// A child process for the tests that run `glmc worker` beside the engine they drive: started with
// posix_spawn, signalled, and killed with the object.
#pragma once

#include <gtest/gtest.h>

#include <csignal>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace glm::testing {

class ChildProcess {
public:
  /// Runs args[0] with `args`, in this process's environment.
  explicit ChildProcess(std::vector<std::string> args) {
    std::vector<char *> argv;
    for (std::string &a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    EXPECT_EQ(::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ), 0) << args[0];
  }
  ChildProcess(const ChildProcess &) = delete;
  ChildProcess &operator=(const ChildProcess &) = delete;
  ~ChildProcess() { kill(); }
  /// Sends `sig` (SIGSTOP: a process that is alive but answers nothing).
  void signal(int sig) { ::kill(pid_, sig); }
  /// SIGKILL, and waits until it is gone.
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

private:
  pid_t pid_ = -1;
};

} // namespace glm::testing
