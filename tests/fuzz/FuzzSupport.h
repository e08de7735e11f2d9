// What the libFuzzer targets of tests/fuzz share: the fixture path, reading a fixture, and a check
// that turns a broken contract into a crash libFuzzer reports.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pthread.h>
#include <sstream>
#include <string>
#include <utility>

namespace glm::fuzz {

/// ../shared/fixtures (GLM_FIXTURES_DIR at configure time); GLM_FIXTURES_DIR in the environment
/// wins, so a binary copied elsewhere still finds it.
inline std::filesystem::path fixturesDir() {
  if (const char *env = std::getenv("GLM_FIXTURES_DIR")) {
    return env;
  }
  return GLM_FIXTURES_DIR;
}

/// A fixture file's bytes; a missing fixture ends the process (the target cannot run without it).
inline std::string readFixture(const std::string &relative) {
  const std::filesystem::path path = fixturesDir() / relative;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz: cannot read fixture %s\n", path.c_str());
    std::exit(2);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A broken contract (not a refused input): print why and abort, which libFuzzer records as a
/// crash with this input.
[[noreturn]] inline void contractBroken(const char *what, const std::string &detail) {
  std::fprintf(stderr, "fuzz: contract broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

/// Runs `fn` on a thread with a stack of `bytes`. ASan's redzones make frames several times
/// larger than a release build's, so a recursion bounded for an 8 MB release stack (the Jinja
/// renderer's 1,024 levels take 1-2 MB there) overflows 8 MB under ASan; 64 MB gives the fuzzed
/// code the headroom it has in release while a recursion without a bound still overflows.
template <typename F> void runWithStack(size_t bytes, F &&fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  auto body = [](void *arg) -> void * {
    (*static_cast<F *>(arg))();
    return nullptr;
  };
  if (pthread_create(&thread, &attr, body, &fn) != 0) {
    contractBroken("pthread_create", "no thread for the fuzzed code");
  }
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

inline constexpr size_t kReleaseLikeStack = size_t(64) << 20;

} // namespace glm::fuzz

#define GLM_FUZZ_CHECK(cond, detail)                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      ::glm::fuzz::contractBroken(#cond, (detail));                                                \
    }                                                                                              \
  } while (0)
