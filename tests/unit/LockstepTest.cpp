// Tensor parallelism across processes: rank 0 as a LockstepEngine in the test, rank 1 as a
// `glmc worker` child over TCP. TP 2 gives the TP 1 logits of the tiny fixture; a worker killed
// mid-generation fails the request in flight, shows on /health, and a restarted one is taken back.
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/LockstepEngine.h"
#include "runtime/engine/Scheduler.h"
#include "server/http/HttpServer.h"

#include "models/glm53/Config.h"
#include "tests/unit/support/ChildProcess.h"
#include "tests/unit/support/Compare.h"
#include "tests/unit/support/ForwardingEngine.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <future>
#include <unistd.h>

namespace glm::runtime {
namespace {

using Json = nlohmann::json;

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// A plan file of the tiny fixture, removed with the object.
class CompiledPlan {
public:
  explicit CompiledPlan(int tp)
      : path_(std::filesystem::temp_directory_path() /
              ("lockstep_" + std::to_string(::getpid()) + "_" + std::to_string(tp) + ".glmp")) {
    const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                                path_.string() +
                                " --target cpu --precision f32 --prefill-logits all --tp " +
                                std::to_string(tp) + " 2>/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  ~CompiledPlan() { std::filesystem::remove(path_); }
  const std::filesystem::path &path() const { return path_; }
  std::unique_ptr<PlanFile> open() const { return std::move(PlanFile::open(path_)).value(); }

private:
  std::filesystem::path path_;
};

/// `glmc worker` for rank 1 as a child process; killed with the object.
class Worker : public glm::testing::ChildProcess {
public:
  Worker(const CompiledPlan &plan, int port)
      : ChildProcess({GLM_GLMC_PATH, "worker", plan.path().string(), "--model", kTiny.string(),
                      "--rank", "1", "--head", "127.0.0.1:" + std::to_string(port),
                      // An orphan (a crashed test) gives up on its own.
                      "--wait", "20"}) {}
};

/// Rank 0: a LockstepEngine over a CPU engine of `plan`, listening on a free port.
std::unique_ptr<LockstepEngine> rankZero(const CompiledPlan &plan, const Checkpoint &checkpoint,
                                         TcpCommOptions commOptions = {}) {
  std::unique_ptr<PlanFile> file = plan.open();
  const std::string identity = lockstepIdentity(*file, checkpoint);
  std::unique_ptr<TcpComm> comm =
      std::move(TcpComm::listen("127.0.0.1", 0, 2, commOptions)).value();
  CpuEngineOptions options;
  options.comm = comm.get();
  std::unique_ptr<CpuEngine> local =
      std::move(CpuEngine::create(std::move(file), checkpoint, options)).value();
  return std::move(LockstepEngine::create(std::move(comm), std::move(local), identity)).value();
}

int32_t argmax(const float *row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

/// Two sequences prefilled, then decoded together greedily for `steps` steps; every logits row
/// in order, and the tokens. Ends one sequence and opens another in between, so that rank 0's
/// slot numbers are exercised on the worker too.
struct Generation {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  Status status;
};

Generation generate(Engine &engine, int steps) {
  Generation run;
  auto fail = [&](Status s) {
    run.status = std::move(s);
    return run;
  };
  const int64_t vocab = engine.vocabSize();
  const std::vector<int32_t> prompts[2] = {{5, 17, 300, 42, 7, 99, 1000, 3}, {11, 250, 8}};
  Expected<int> scratch = engine.newSequence();
  if (!scratch.ok()) {
    return fail(scratch.status());
  }
  int slots[2];
  std::vector<int32_t> next(2);
  for (int s = 0; s < 2; ++s) {
    Expected<int> slot = engine.newSequence();
    if (!slot.ok()) {
      return fail(slot.status());
    }
    slots[s] = *slot;
    Expected<std::vector<float>> logits = engine.prefill(*slot, prompts[s]);
    if (!logits.ok()) {
      return fail(logits.status());
    }
    run.logits.insert(run.logits.end(), logits->begin(), logits->end());
    next[static_cast<size_t>(s)] = argmax(logits->data() + logits->size() - vocab, vocab);
    if (s == 0) {
      engine.endSequence(*scratch);
    }
  }
  for (int i = 0; i < steps; ++i) {
    run.tokens.insert(run.tokens.end(), next.begin(), next.end());
    Expected<std::vector<float>> logits = engine.decode(slots, next);
    if (!logits.ok()) {
      return fail(logits.status());
    }
    run.logits.insert(run.logits.end(), logits->begin(), logits->end());
    for (size_t s = 0; s < 2; ++s) {
      next[s] = argmax(logits->data() + s * static_cast<size_t>(vocab), vocab);
    }
  }
  engine.endSequence(slots[0]);
  engine.endSequence(slots[1]);
  return run;
}

TEST(Lockstep, TwoProcessesOverTcpGiveTheOneRankLogits) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan one(1), two(2);
  std::unique_ptr<CpuEngine> reference =
      std::move(CpuEngine::create(one.open(), *checkpoint)).value();
  const Generation expected = generate(*reference, 5);
  ASSERT_TRUE(expected.status.ok()) << expected.status.toString();

  std::unique_ptr<LockstepEngine> engine = rankZero(two, *checkpoint);
  EXPECT_FALSE(engine->health().ok());
  EXPECT_NE(engine->health().message().find("rank 1 of 2 is not connected"), std::string::npos)
      << engine->health().message();
  Worker worker(two, engine->port());
  ASSERT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  const Generation got = generate(*engine, 5);
  ASSERT_TRUE(got.status.ok()) << got.status.toString();

  const int64_t vocab = reference->vocabSize();
  ASSERT_EQ(got.logits.size(), expected.logits.size());
  double worst = 0;
  for (size_t row = 0; row < expected.logits.size() / static_cast<size_t>(vocab); ++row) {
    worst = std::max(worst, glm::testing::relativeL2(got.logits.data() + row * vocab,
                                                     expected.logits.data() + row * vocab, vocab));
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(got.tokens, expected.tokens);
}

TEST(Lockstep, AWorkerOfAnotherPlanIsRefused) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  std::unique_ptr<PlanFile> plan = two.open();
  const std::string ours = lockstepIdentity(*plan, *checkpoint);
  std::string theirs = ours;
  theirs[theirs.find("plan=") + 5] ^= 1;
  Status s = compareLockstepIdentity(1, theirs, ours);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 runs a different plan"), std::string::npos) << s.message();
  theirs = ours;
  theirs[theirs.find("lockstep=") + 9] ^= 1;
  s = compareLockstepIdentity(1, theirs, ours);
  EXPECT_NE(s.message().find("rank 1 speaks lockstep protocol"), std::string::npos) << s.message();
  theirs = ours;
  theirs[theirs.find("weights=") + 8] ^= 1;
  s = compareLockstepIdentity(1, theirs, ours);
  EXPECT_NE(s.message().find("rank 1 has a different checkpoint"), std::string::npos)
      << s.message();
  EXPECT_TRUE(compareLockstepIdentity(1, ours, ours).ok());
}

/// Forwards to an engine; its `gateAt`-th decode call waits for the test's release, so that the
/// test can act while a request is certainly in flight.
class GatedEngine : public testing::ForwardingEngine {
public:
  using ForwardingEngine::ForwardingEngine;
  Expected<std::vector<float>> decode(std::span<const int> slots,
                                      std::span<const int32_t> tokens) override {
    gate();
    return ForwardingEngine::decode(slots, tokens);
  }
  Expected<std::vector<SampledToken>> decodeSample(std::span<const int> slots,
                                                   std::span<const int32_t> tokens,
                                                   std::span<const RowSampling> sampling,
                                                   std::vector<float> *logits) override {
    gate();
    return ForwardingEngine::decodeSample(slots, tokens, sampling, logits);
  }
  /// Holds the gated decode step until the test releases it.
  void gate() {
    if (gateAt > 0 && ++decodes == gateAt) {
      gateAt = 0;
      reached.set_value();
      release.get_future().wait();
    }
  }

  std::atomic<int> gateAt{0};
  std::atomic<int> decodes{0};
  std::promise<void> reached, release;
};

/// Rank 1 as a thread of this test over TCP (what `glmc worker` runs), with its own formGroup.
class WorkerThread {
public:
  WorkerThread(const CompiledPlan &plan, const Checkpoint &checkpoint, int port,
               std::function<Status(Comm &)> formGroup) {
    std::unique_ptr<PlanFile> file = plan.open();
    comm_ = std::move(TcpComm::worker("127.0.0.1", port, 1, 2, lockstepIdentity(*file, checkpoint)))
                .value();
    CpuEngineOptions options;
    options.comm = comm_.get();
    engine_ = std::move(CpuEngine::create(std::move(file), checkpoint, options)).value();
    thread_ = std::thread([this, formGroup = std::move(formGroup)] {
      // Joins, serves until the connection ends, and rejoins, like `glmc worker`.
      while (!stop_ && comm_->connect(20000).ok()) {
        ended_.push_back(runLockstepWorker(*comm_, *engine_, {}, formGroup));
        if (comm_->complete()) {
          return; // its formGroup failed: it stops, as `glmc worker` exits
        }
      }
    });
  }
  ~WorkerThread() { stop(); }
  /// Ends the connection (the worker rejoins unless stopping).
  void drop() { comm_->disconnect("the test dropped it"); }
  void stop() {
    stop_ = true;
    drop();
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  /// Waits for the worker to stop on its own (its formGroup failed).
  void join() { thread_.join(); }
  /// Why each of its runs ended (read once it has stopped).
  const std::vector<Status> &ended() const { return ended_; }

private:
  std::unique_ptr<TcpComm> comm_;
  std::unique_ptr<CpuEngine> engine_;
  std::atomic<bool> stop_{false};
  std::vector<Status> ended_;
  std::thread thread_;
};

/// Rank 0 as rankZero makes it, with `formGroup`.
std::unique_ptr<LockstepEngine> formingRankZero(const CompiledPlan &plan,
                                                const Checkpoint &checkpoint,
                                                std::function<Status(Comm &)> formGroup) {
  std::unique_ptr<PlanFile> file = plan.open();
  const std::string identity = lockstepIdentity(*file, checkpoint);
  std::unique_ptr<TcpComm> comm = std::move(TcpComm::listen("127.0.0.1", 0, 2)).value();
  CpuEngineOptions options;
  options.comm = comm.get();
  std::unique_ptr<CpuEngine> local =
      std::move(CpuEngine::create(std::move(file), checkpoint, options)).value();
  LockstepOptions lockstep;
  lockstep.formGroup = std::move(formGroup);
  lockstep.log = [](const std::string &) {};
  return std::move(LockstepEngine::create(std::move(comm), std::move(local), identity, lockstep))
      .value();
}

TEST(Lockstep, EveryRankFormsEachNewGroupBeforeItsFirstCall) {
  // What sets up a GPU group's NCCL communicator: every rank runs its formGroup at the same point,
  // may use the control channel there, and does so again when the group forms anew.
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  std::atomic<int> formed0{0}, formed1{0};
  std::atomic<uint32_t> received{0};
  std::unique_ptr<LockstepEngine> engine = formingRankZero(two, *checkpoint, [&](Comm &control) {
    uint32_t value = 1000 + static_cast<uint32_t>(++formed0);
    return control.broadcast(&value, sizeof value);
  });
  WorkerThread worker(two, *checkpoint, engine->port(), [&](Comm &control) {
    ++formed1;
    uint32_t value = 0;
    Status s = control.broadcast(&value, sizeof value);
    received = value;
    return s;
  });
  ASSERT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  EXPECT_EQ(formed0.load(), 1);
  EXPECT_EQ(formed1.load(), 1);
  EXPECT_EQ(received.load(), 1001u);
  Expected<int> slot = engine->newSequence();
  ASSERT_TRUE(slot.ok()) << slot.status().toString();
  EXPECT_TRUE(engine->prefill(*slot, std::vector<int32_t>{5, 17, 300}).ok());

  // The worker drops out and rejoins: a new group, formed again before it serves.
  worker.drop();
  Expected<std::vector<float>> lost = engine->prefill(*slot, std::vector<int32_t>{7});
  EXPECT_FALSE(lost.ok());
  ASSERT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  EXPECT_EQ(formed0.load(), 2);
  EXPECT_EQ(formed1.load(), 2);
  EXPECT_EQ(received.load(), 1002u);
  Expected<int> fresh = engine->newSequence();
  ASSERT_TRUE(fresh.ok()) << fresh.status().toString();
  EXPECT_TRUE(engine->prefill(*fresh, std::vector<int32_t>{5, 17, 300}).ok());
}

TEST(Lockstep, AGroupThatFailsToFormOnRankZeroEndsAndFormsAgainWhenTheWorkerRejoins) {
  // Rank 0's first formGroup fails (an NCCL set-up that failed there): that group ends, although
  // the worker's part succeeded, and the worker rejoins; the second group forms.
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  std::atomic<int> formed0{0}, formed1{0};
  std::unique_ptr<LockstepEngine> engine = formingRankZero(two, *checkpoint, [&](Comm &) {
    return ++formed0 == 1 ? Status(StatusCode::Unavailable, "rank 0 could not set up")
                          : Status::success();
  });
  WorkerThread worker(two, *checkpoint, engine->port(), [&](Comm &) {
    ++formed1;
    return Status::success();
  });
  ASSERT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  EXPECT_EQ(formed0.load(), 2);
  EXPECT_EQ(formed1.load(), 2);
  Expected<int> slot = engine->newSequence();
  ASSERT_TRUE(slot.ok()) << slot.status().toString();
  EXPECT_TRUE(engine->prefill(*slot, std::vector<int32_t>{5, 17, 300}).ok());
}

TEST(Lockstep, AWorkerThatCannotFormTheGroupStopsAndRankZeroWaitsForAnother) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  std::unique_ptr<LockstepEngine> engine =
      formingRankZero(two, *checkpoint, [](Comm &) { return Status::success(); });
  WorkerThread worker(two, *checkpoint, engine->port(), [](Comm &) {
    return Status(StatusCode::Unavailable, "NCCL is not installed here");
  });
  worker.join(); // it gives up: its run ends with the connection up
  ASSERT_EQ(worker.ended().size(), 1u);
  EXPECT_NE(worker.ended()[0].message().find("NCCL is not installed here"), std::string::npos)
      << worker.ended()[0].toString();
  // Rank 0 ends that group once the worker's failure reaches it: then it is not healthy and
  // says which rank failed. The worker's thread may end first, and until then health() says the
  // group is forming (not healthy either), so the wait is for the failure itself.
  const std::string failed = "rank 1 failed forming the group";
  Status health = engine->health();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (health.message().find(failed) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    health = engine->health();
  }
  ASSERT_FALSE(health.ok());
  EXPECT_NE(health.message().find(failed), std::string::npos) << health.message();
}

/// A decode step of rank 0 (with `options`) while its worker is stopped with SIGSTOP, which leaves
/// the worker's connection open but answering nothing: the step must fail, not wait. Returns
/// how it failed (success if it did not), and whether rank 0 then reports itself unhealthy.
std::pair<Status, bool> decodeWithTheWorkerStopped(TcpCommOptions options) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  std::unique_ptr<LockstepEngine> engine = rankZero(two, *checkpoint, options);
  Worker worker(two, engine->port());
  EXPECT_TRUE(engine->waitForWorkers(60000).ok()) << engine->health().toString();
  Expected<int> slot = engine->newSequence();
  if (!slot.ok()) {
    return {slot.status(), false};
  }
  EXPECT_TRUE(engine->prefill(*slot, std::vector<int32_t>{5, 17, 300}).ok());
  worker.signal(SIGSTOP);
  const int32_t next = 42;
  Expected<std::vector<float>> stalled = engine->decode(std::span(&*slot, 1), std::span(&next, 1));
  // Health while the worker is still stopped: once it runs again it may rejoin at once.
  const bool unhealthy = !engine->health().ok();
  worker.signal(SIGCONT);
  return {stalled.status(), unhealthy};
}

TEST(Lockstep, AStoppedWorkerFailsTheCallOnceItHasBeenSilentForTheTimeout) {
  // A 2 s timeout, under the 5 s silence bound: the progress bound fails the call.
  const auto [stalled, unhealthy] = decodeWithTheWorkerStopped(TcpCommOptions{2000});
  ASSERT_FALSE(stalled.ok());
  EXPECT_EQ(stalled.code(), StatusCode::Unavailable) << stalled.toString();
  EXPECT_NE(stalled.message().find("rank 1 did not answer within 2000 ms"), std::string::npos)
      << stalled.toString();
  EXPECT_TRUE(unhealthy);
}

TEST(Lockstep, AStoppedWorkerIsFoundBySilenceLongBeforeTheTimeout) {
  // With a ten-minute timeout, a stopped worker still fails the call within rank 0's silence
  // bound: its heartbeats (every second, `glmc worker`'s default) stop with it.
  TcpCommOptions options;
  options.timeoutMs = 600000;
  options.silenceMs = 3000;
  const auto [stalled, unhealthy] = decodeWithTheWorkerStopped(options);
  ASSERT_FALSE(stalled.ok());
  EXPECT_NE(stalled.message().find("rank 1 sent nothing for 3000 ms"), std::string::npos)
      << stalled.toString();
  EXPECT_TRUE(unhealthy);
}

TEST(Lockstep, AKilledWorkerFailsTheRequestInFlightAndARestartedOneIsTakenBack) {
  std::unique_ptr<Checkpoint> checkpoint = std::move(Checkpoint::open(kTiny)).value();
  const CompiledPlan two(2);
  std::unique_ptr<LockstepEngine> owned = rankZero(two, *checkpoint);
  LockstepEngine *lockstep = owned.get();
  auto gated = std::make_unique<GatedEngine>(std::move(owned));
  GatedEngine *gate = gated.get();
  Scheduler scheduler(std::move(gated), 16);

  server::Tokenizer tokenizer = std::move(server::Tokenizer::fromModelDir(kTiny)).value();
  server::ChatTemplate chatTemplate = std::move(server::loadChatTemplate(kTiny)).value();
  const std::vector<int64_t> eos = std::move(glm53::loadGlm53Config(kTiny)).value().eosTokenIds;
  server::ServedModel model{&tokenizer, &chatTemplate,
                            std::move(server::loadChatTokenizerConfig(kTiny)).value(),
                            std::vector<int32_t>(eos.begin(), eos.end())};
  server::ServerOptions options;
  options.port = 0;
  options.servedNames = {"tiny"};
  options.maxContext = 2048;
  server::HttpServer http(options, scheduler, model);
  const int port = *http.bind();
  std::thread serving([&] { http.serve(); });
  auto client = [&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  };
  const std::string request = Json{
      {"model", "tiny"},
      {"prompt", "tensor parallel"},
      {"max_tokens", 6},
      {"temperature", 0},
      {"ignore_eos", true}}.dump();

  // Before the worker joins, /health names it and requests are refused.
  {
    auto health = client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 503);
    EXPECT_NE(health->body.find("rank 1"), std::string::npos) << health->body;
    auto refused = client().Post("/v1/completions", request, "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 503);
  }

  auto worker = std::make_unique<Worker>(two, lockstep->port());
  ASSERT_TRUE(lockstep->waitForWorkers(60000).ok()) << lockstep->health().toString();
  auto first = client().Post("/v1/completions", request, "application/json");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const Json firstReply = Json::parse(first->body);
  ASSERT_TRUE(firstReply.contains("choices")) << first->body;
  const std::string text = firstReply["choices"][0]["text"];

  // The second request stops at its second decode step; the worker dies meanwhile.
  gate->decodes = 0;
  gate->gateAt = 2;
  std::future<httplib::Result> inFlight = std::async(std::launch::async, [&] {
    return client().Post("/v1/completions", request, "application/json");
  });
  gate->reached.get_future().wait();
  worker->kill();
  gate->release.set_value();
  httplib::Result failed = inFlight.get();
  ASSERT_TRUE(failed);
  // A whole reply's status says how it ended: 503, OpenAI's error, the rank named.
  EXPECT_EQ(failed->status, 503) << failed->body;
  const Json error = Json::parse(failed->body);
  ASSERT_TRUE(error.contains("error")) << failed->body;
  EXPECT_EQ(error["error"]["code"], "engine_unavailable") << failed->body;
  EXPECT_NE(error["error"]["message"].get<std::string>().find("rank 1"), std::string::npos)
      << failed->body;

  {
    auto health = client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 503);
    EXPECT_NE(health->body.find("rank 1 of 2 is not connected"), std::string::npos) << health->body;
    auto refused = client().Post("/v1/completions", request, "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 503) << refused->body;
  }

  // A restarted worker is admitted and serving resumes, with the same greedy reply.
  worker = std::make_unique<Worker>(two, lockstep->port());
  ASSERT_TRUE(lockstep->waitForWorkers(60000).ok()) << lockstep->health().toString();
  {
    auto health = client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200) << health->body;
  }
  auto again = client().Post("/v1/completions", request, "application/json");
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(Json::parse(again->body)["choices"][0]["text"], text) << again->body;

  http.stop(0);
  serving.join();
}

} // namespace
} // namespace glm::runtime
