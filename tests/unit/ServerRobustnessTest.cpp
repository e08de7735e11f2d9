// The server under hostile clients and a hostile network, end to end (issue 26), label `slow`:
// connections to the tensor-parallel port that are idle or hold the wrong secret while a request
// runs, a worker whose weight bytes differ under the same tensor table, `glmc serve`'s drain on
// SIGTERM (and a second SIGTERM), and the memory 16 maximal bodies cost at once.
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/LockstepEngine.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <regex>
#include <spawn.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace glm::runtime {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kTiny = fs::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// A plan file of the tiny fixture, removed with the object.
class CompiledPlan {
public:
  CompiledPlan(int tp, const std::string &extra = "")
      : path_(fs::temp_directory_path() /
              ("robust_" + std::to_string(::getpid()) + "_" + std::to_string(tp) + ".glmp")) {
    const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                                path_.string() + " --target cpu --precision f32 --tp " +
                                std::to_string(tp) + " " + extra + " 2>/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  ~CompiledPlan() { fs::remove(path_); }
  const fs::path &path() const { return path_; }
  std::unique_ptr<PlanFile> open() const { return std::move(PlanFile::open(path_)).value(); }

private:
  fs::path path_;
};

const char kSecret[] = "robustness test secret, 32 bytes";

/// Rank 0 as `glmc serve --tp-listen` makes it: its load digests both ranks' weight parts.
std::unique_ptr<LockstepEngine> rankZero(const CompiledPlan &plan, const Checkpoint &checkpoint,
                                         TcpCommOptions commOptions) {
  std::unique_ptr<PlanFile> file = plan.open();
  const std::string identity = lockstepIdentity(*file, checkpoint);
  std::unique_ptr<TcpComm> comm =
      std::move(TcpComm::listen("127.0.0.1", 0, 2, commOptions)).value();
  WeightDigest digest({1});
  CpuEngineOptions options;
  options.comm = comm.get();
  options.weights.digest = &digest;
  std::unique_ptr<CpuEngine> local =
      std::move(CpuEngine::create(std::move(file), checkpoint, options)).value();
  LockstepOptions lockstep;
  lockstep.weightDigests = {digest.hex(0), digest.hex(1)};
  std::vector<std::string> *log = new std::vector<std::string>; // leaked: outlives the engine
  static std::mutex logMutex;
  lockstep.log = [log](const std::string &m) {
    std::lock_guard<std::mutex> lock(logMutex);
    log->push_back(m);
  };
  return std::move(LockstepEngine::create(std::move(comm), std::move(local), identity, lockstep))
      .value();
}

/// Rank 1 as `glmc worker` runs it, on a thread: its identity carries its own weight digest.
class WorkerThread {
public:
  WorkerThread(const CompiledPlan &plan, const Checkpoint &checkpoint, int port,
               TcpCommOptions options) {
    std::unique_ptr<PlanFile> file = plan.open();
    const std::string identity = lockstepIdentity(*file, checkpoint);
    comm_ = std::move(TcpComm::worker("127.0.0.1", port, 1, 2, identity, options)).value();
    WeightDigest digest;
    CpuEngineOptions engineOptions;
    engineOptions.comm = comm_.get();
    engineOptions.weights.digest = &digest;
    engine_ = std::move(CpuEngine::create(std::move(file), checkpoint, engineOptions)).value();
    comm_->setIdentity(withWeightDigest(identity, digest.hex(1)));
    thread_ = std::thread([this] {
      while (!stop_) {
        Status joined = comm_->connect(20000);
        if (!joined.ok()) {
          refused_ = joined;
          return;
        }
        (void)runLockstepWorker(*comm_, *engine_, {}, {});
      }
    });
  }
  ~WorkerThread() {
    stop_ = true;
    comm_->disconnect("the test ends");
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  /// Why it could not join (once its thread ended).
  Status refused() {
    if (thread_.joinable()) {
      thread_.join();
    }
    return refused_;
  }

private:
  std::unique_ptr<TcpComm> comm_;
  std::unique_ptr<CpuEngine> engine_;
  std::atomic<bool> stop_{false};
  Status refused_;
  std::thread thread_;
};

/// A prefill and a few decode steps on `engine`.
Status generateSome(Engine &engine) {
  GLM_ASSIGN_OR_RETURN(int slot, engine.newSequence());
  GLM_ASSIGN_OR_RETURN(std::vector<float> logits,
                       engine.prefill(slot, std::vector<int32_t>{5, 17, 300}, LogitRows::Last));
  int32_t next = 42;
  for (int i = 0; i < 4; ++i) {
    const int slots[] = {slot};
    GLM_RETURN_IF_ERROR(engine.decode(slots, std::span(&next, 1)).status());
  }
  engine.endSequence(slot);
  return Status::success();
}

int connectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&to), sizeof to), 0);
  return fd;
}

TEST(ServerRobustness, IdleAndWrongSecretConnectionsToTheTpPortDoNotStallTheGroup) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  TcpCommOptions options;
  options.secret = kSecret;
  options.helloTimeoutMs = 30000; // the idle connections stay pending all through the test
  options.timeoutMs = 3000;       // a rank 0 that stopped answering would drop the worker in 3 s
  std::unique_ptr<LockstepEngine> engine = rankZero(two, *checkpoint, options);
  WorkerThread worker(two, *checkpoint, engine->port(), options);
  ASSERT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  ASSERT_TRUE(generateSome(*engine).ok());

  // Idle connections, and a worker with another secret trying again and again, while requests run.
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(connectTo(engine->port()));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> refusals{0};
  std::thread intruder([&] {
    TcpCommOptions wrong = options;
    wrong.secret = "not the group's secret at all!!!";
    while (!stop) {
      auto comm = std::move(TcpComm::worker("127.0.0.1", engine->port(), 1, 2, "x", wrong)).value();
      if (!comm->connect(5000).ok()) {
        ++refusals;
      }
    }
  });
  // For longer than the worker's timeout: a group stalled by a connection that is not a member
  // would have lost its worker by then.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int calls = 0;
  while (std::chrono::steady_clock::now() < until) {
    Status s = generateSome(*engine);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(engine->health().ok()) << engine->health().toString();
    ++calls;
  }
  stop = true;
  intruder.join();
  for (int fd : idle) {
    ::close(fd);
  }
  EXPECT_GT(calls, 0);
  EXPECT_GT(refusals.load(), 0);
  EXPECT_TRUE(engine->health().ok()) << engine->health().toString();
}

/// A copy of the tiny fixture whose weight bytes differ from it in one tensor (same names,
/// dtypes, shapes: the same tensor table).
fs::path fixtureWithOtherBytes() {
  const fs::path dir = fs::temp_directory_path() / ("robust_tiny_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char *name : {"config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json", "chat_template.jinja"}) {
    fs::copy_file(kTiny / name, dir / name, fs::copy_options::overwrite_existing);
    fs::permissions(dir / name, fs::perms::owner_read | fs::perms::owner_write);
  }
  // The last byte of the file: the end of the last tensor's data, which every rank loads a part
  // of or all of (a replicated norm or the last expert's slice: either way a rank's digest moves).
  std::fstream file(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t headerBytes = 0;
  file.read(reinterpret_cast<char *>(&headerBytes), 8);
  std::string header(headerBytes, '\0');
  file.read(header.data(), static_cast<std::streamsize>(headerBytes));
  // Flip one byte in every tensor (a few bytes in), so whichever part a rank loads changes.
  const Json meta = Json::parse(header);
  for (const auto &[name, tensor] : meta.items()) {
    if (name == "__metadata__") {
      continue;
    }
    const uint64_t begin = tensor["data_offsets"][0], end = tensor["data_offsets"][1];
    for (uint64_t at = begin; at < end; at += std::max<uint64_t>(1, (end - begin) / 4)) {
      file.seekg(static_cast<std::streamoff>(8 + headerBytes + at));
      char c = 0;
      file.read(&c, 1);
      c ^= 0x10;
      file.seekp(static_cast<std::streamoff>(8 + headerBytes + at));
      file.write(&c, 1);
    }
  }
  return dir;
}

TEST(ServerRobustness, AWorkerHoldingOtherWeightBytesIsRefused) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const fs::path other = fixtureWithOtherBytes();
  std::unique_ptr<Checkpoint> otherCheckpoint = std::move(Checkpoint::open(other)).value();
  const CompiledPlan two(2);
  TcpCommOptions options;
  options.secret = kSecret;
  std::unique_ptr<LockstepEngine> engine = rankZero(two, *checkpoint, options);
  {
    WorkerThread impostor(two, *otherCheckpoint, engine->port(), options);
    const Status refused = impostor.refused();
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("holds different weight bytes"), std::string::npos)
        << refused.message();
    EXPECT_FALSE(engine->health().ok());
  }
  // The same files join.
  WorkerThread worker(two, *checkpoint, engine->port(), options);
  ASSERT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  EXPECT_TRUE(generateSome(*engine).ok());
  fs::remove_all(other);
}

/// `glmc serve` as a child process, its stdout and stderr in files.
class Serve {
public:
  explicit Serve(std::vector<std::string> args)
      : log_(fs::temp_directory_path() / ("robust_serve_" + std::to_string(::getpid()) + "_" +
                                          std::to_string(count_++) + ".log")) {
    args.insert(args.begin(), {GLM_GLMC_PATH, "serve"});
    std::vector<char *> argv;
    for (std::string &a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Serve() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove(log_);
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  /// The port it reports ready on; -1 if it does not within a minute.
  int port() {
    const std::regex ready("ready on http://[^:]+:([0-9]+)");
    for (int i = 0; i < 600; ++i) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, ready)) {
        return std::stoi(m[1]);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  /// Its exit status (128 + the signal that killed it), or -1 if it still runs after `seconds`.
  int wait(int seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  /// Its resident set now and its peak (VmRSS, VmHWM), in bytes.
  std::pair<int64_t, int64_t> memory() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    int64_t rss = 0, hwm = 0;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) {
        rss = std::stoll(line.substr(6)) * 1024;
      } else if (line.rfind("VmHWM:", 0) == 0) {
        hwm = std::stoll(line.substr(6)) * 1024;
      }
    }
    return {rss, hwm};
  }
  /// Resets the peak (VmHWM) to the current resident set.
  void resetPeak() const { std::ofstream("/proc/" + std::to_string(pid_) + "/clear_refs") << "5"; }

private:
  static inline int count_ = 0;
  fs::path log_;
  pid_t pid_ = -1;
};

std::vector<Json> events(const std::string &body) {
  std::vector<Json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) {
      const std::string data = line.substr(6);
      out.push_back(data == "[DONE]" ? Json("[DONE]") : Json::parse(data, nullptr, false));
    }
  }
  return out;
}

/// Long streams on `port`, each on a thread, its body kept.
struct LongStreams {
  LongStreams(int port, int count, int maxTokens) : bodies(static_cast<size_t>(count)) {
    for (int i = 0; i < count; ++i) {
      threads.emplace_back([this, port, i, maxTokens] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(120, 0);
        const Json request = {{"model", "tiny"},         {"prompt", "stream " + std::to_string(i)},
                              {"max_tokens", maxTokens}, {"temperature", 0},
                              {"ignore_eos", true},      {"stream", true}};
        auto res = c.Post("/v1/completions", request.dump(), "application/json");
        if (res) {
          bodies[static_cast<size_t>(i)] = res->body;
        }
        ++done;
      });
    }
  }
  void join() {
    for (std::thread &t : threads) {
      t.join();
    }
  }
  std::vector<std::string> bodies;
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
};

/// Waits until the server's metrics show `running` requests running.
void waitRunning(int port, int running) {
  for (int i = 0; i < 600; ++i) {
    httplib::Client c("127.0.0.1", port);
    auto m = c.Get("/metrics");
    if (m && m->body.find("vllm:num_requests_running{model_name=\"tiny\"} " +
                          std::to_string(running)) != std::string::npos) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "never saw " << running << " requests running";
}

TEST(ServerRobustness, SigtermDrainsThenCutsStreamsCleanlyAndExitsZero) {
  const CompiledPlan one(1, "--max-context 16384");
  Serve serve({one.path().string(), "--model", kTiny.string(), "--served-name", "tiny", "--port",
               "0", "--drain-timeout", "2"});
  const int port = serve.port();
  ASSERT_GT(port, 0) << serve.log();
  LongStreams streams(port, 4, 16000); // far longer than the 2 s drain
  waitRunning(port, 4);
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60), 0) << serve.log();
  streams.join();
  for (const std::string &body : streams.bodies) {
    const std::vector<Json> ev = events(body);
    ASSERT_GE(ev.size(), 3u) << body.substr(0, 2000);
    EXPECT_EQ(ev.back(), "[DONE]");
    EXPECT_EQ(ev[ev.size() - 3]["error"]["code"], "server_shutting_down") << ev[ev.size() - 3];
    EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length") << ev[ev.size() - 2];
  }
  EXPECT_NE(serve.log().find("4 requests cut at the drain deadline"), std::string::npos)
      << serve.log();
}

TEST(ServerRobustness, ASecondSigtermExitsAtOnce) {
  const CompiledPlan one(1, "--max-context 16384");
  Serve serve({one.path().string(), "--model", kTiny.string(), "--served-name", "tiny", "--port",
               "0", "--drain-timeout", "600"});
  const int port = serve.port();
  ASSERT_GT(port, 0) << serve.log();
  LongStreams streams(port, 2, 16000);
  waitRunning(port, 2);
  serve.signal(SIGTERM);
  // Draining: /health says so.
  for (int i = 0; i < 200; ++i) {
    httplib::Client c("127.0.0.1", port);
    auto health = c.Get("/health");
    if (health && health->status == 503) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(30), 128 + SIGTERM) << serve.log();
  streams.join();
}

/// The figure docs/performance.md quotes: 16 bodies of the maximal size (32 MiB) at once, each a
/// chat request far beyond the context, cost under 2 GB above the idle server's resident set.
TEST(ServerRobustness, SixteenMaximalBodiesAtOnceStayUnderTwoGigabytesAboveIdle) {
  const CompiledPlan one(1);
  Serve serve(
      {one.path().string(), "--model", kTiny.string(), "--served-name", "tiny", "--port", "0"});
  const int port = serve.port();
  ASSERT_GT(port, 0) << serve.log();
  {
    httplib::Client c("127.0.0.1", port);
    const Json warm = {{"model", "tiny"}, {"prompt", "warm up"}, {"max_tokens", 4}};
    ASSERT_TRUE(c.Post("/v1/completions", warm.dump(), "application/json"));
  }
  const int64_t idle = serve.memory().first;
  serve.resetPeak();
  // A chat request of words, just under the 32 MiB limit once encoded.
  std::string words;
  const std::string word = "lorem ipsum dolor sit amet ";
  words.reserve(32u << 20);
  while (words.size() + word.size() < (32u << 20) - 256) {
    words += word;
  }
  const std::string body =
      Json{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", words}}}}}.dump();
  ASSERT_LE(body.size(), 32u << 20);
  std::atomic<int> refused{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(300, 0);
      c.set_write_timeout(300, 0);
      auto res = c.Post("/v1/chat/completions", body, "application/json");
      if (res && res->status == 400 &&
          res->body.find("context_length_exceeded") != std::string::npos) {
        ++refused;
      }
    });
  }
  for (std::thread &t : clients) {
    t.join();
  }
  const auto [rss, peak] = serve.memory();
  std::printf("idle RSS %.1f MB, peak %.1f MB, peak above idle %.1f MB (%.1f MB per body)\n",
              idle / 1e6, peak / 1e6, (peak - idle) / 1e6, (peak - idle) / 16e6);
  EXPECT_EQ(refused.load(), 16);
  EXPECT_LT(peak - idle, int64_t{2} << 30);
}

} // namespace
} // namespace glm::runtime
