// Tensor parallelism across processes on the GPU: rank 0 in this process as `glmc serve
// --tp-listen` builds it (openLockstepEngine), rank 1 a `glmc worker` child. Over the TCP-staged
// transport both ranks share this GPU; over NCCL (a machine of two GPUs) the worker runs on
// device 1. The f32 TP 2 plan gives the TP 1 plan's logits (relative error <= 1e-5 per row) and
// greedy tokens; a worker killed during generation fails the call in flight at once, naming rank
// 1, rather than after the timeout; a restarted worker is taken back and the same run comes out.
#include "runtime/comm/NcclComm.h"
#include "runtime/engine/CudaEngine.h"
#include "runtime/engine/LockstepEngine.h"
#include "tests/gpu/support/GpuTest.h"
#include "tests/gpu/support/TinyModel.h"
#include "tests/unit/support/ChildProcess.h"
#include "tools/glmc/OpenEngine.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>

namespace glm::testing {
namespace {

using runtime::DeviceTransport;
using runtime::Engine;

/// `glmc worker` for rank 1 as a child process on CUDA device `device`; killed with the object.
class Worker : public ChildProcess {
public:
  Worker(const std::filesystem::path &plan, int port, int device)
      : ChildProcess({glmcPath(), "worker", plan.string(), "--model", tinyFixture().string(),
                      "--rank", "1", "--head", "127.0.0.1:" + std::to_string(port), "--device",
                      std::to_string(device),
                      // An orphan (a crashed test) gives up on its own.
                      "--wait", "20"}) {}
};

class LockstepGpu : public ::testing::TestWithParam<DeviceTransport> {
protected:
  static void SetUpTestSuite() {
    std::string why;
    if (gpu(&why) == nullptr) {
      setUpError_ = why;
      return;
    }
    const std::string arch = gpu()->info().arch;
    checkpoint_ = std::move(Checkpoint::open(tinyFixture())).value().release();
    const std::string options =
        " --precision f32 --decode 1x1,2x1 --prefill 1152 --prefill-logits all --target " + arch;
    Expected<std::unique_ptr<runtime::PlanFile>> one = compileTiny("gpu_f32", "--tp 1" + options);
    Expected<std::unique_ptr<runtime::PlanFile>> two =
        compileTiny("gpu_f32_tp2", "--tp 2" + options);
    if (!one.ok() || !two.ok()) {
      setUpError_ = (!one.ok() ? one.status() : two.status()).toString();
      return;
    }
    // The worker reads the plan from a file of its own, wherever this one came from.
    planPath_ = std::filesystem::temp_directory_path() /
                ("lockstep_gpu_" + std::to_string(::getpid()) + ".glmp");
    std::ofstream(planPath_, std::ios::binary)
        .write(reinterpret_cast<const char *>((*two)->bytes().data()),
               static_cast<std::streamsize>((*two)->bytes().size()));
    twoBytes_.assign((*two)->bytes().begin(), (*two)->bytes().end());
    Expected<std::unique_ptr<cuda::CudaEngine>> engine =
        cuda::CudaEngine::create(std::move(one).value(), *checkpoint_);
    if (!engine.ok()) {
      setUpError_ = engine.status().toString();
      return;
    }
    Expected<GreedyRun> run = greedyRun(**engine, prompt(), kSteps);
    if (!run.ok()) {
      setUpError_ = run.status().toString();
      return;
    }
    reference_ = new GreedyRun(std::move(run).value());
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete checkpoint_;
    std::filesystem::remove(planPath_);
  }
  void SetUp() override {
    ASSERT_TRUE(setUpError_.empty()) << setUpError_;
    if (GetParam() == DeviceTransport::Nccl) {
      Expected<int> devices = cuda::CudaContext::deviceCount();
      Expected<int> nccl = runtime::ncclVersion();
      if (!devices.ok() || *devices < 2 || !nccl.ok()) {
        GTEST_SKIP() << "NCCL between processes needs two GPUs and NCCL: "
                     << (devices.ok() ? std::to_string(*devices) + " GPU(s)"
                                      : devices.status().message())
                     << ", " << (nccl.ok() ? "NCCL loads" : nccl.status().message());
      }
    }
  }

  static std::vector<int32_t> prompt() { return {5, 17, 300, 42, 7, 99, 1000, 3, 11, 250, 8}; }

  /// Rank 0 over `GetParam()`, with a timeout long enough that a failure within it is not one.
  std::unique_ptr<Engine> rankZero() {
    Expected<std::unique_ptr<runtime::PlanFile>> plan =
        runtime::PlanFile::fromBytes(twoBytes_, planPath_.string());
    EXPECT_TRUE(plan.ok()) << plan.status().toString();
    Expected<std::unique_ptr<Engine>> engine =
        tools::openLockstepEngine(std::move(plan).value(), *checkpoint_, "127.0.0.1:0",
                                  runtime::TcpCommOptions{60000}, GetParam());
    EXPECT_TRUE(engine.ok()) << engine.status().toString();
    return engine.ok() ? std::move(engine).value() : nullptr;
  }
  int workerDevice() const { return GetParam() == DeviceTransport::Nccl ? 1 : 0; }

  /// The TP 2 run against the TP 1 reference.
  static void expectReference(const GreedyRun &run, int64_t vocab, const char *when) {
    ASSERT_EQ(run.logits.size(), reference_->logits.size()) << when;
    double worst = 0;
    for (size_t r = 0; r < run.logits.size() / static_cast<size_t>(vocab); ++r) {
      worst = std::max(worst, rowError(run.logits.data() + r * vocab,
                                       reference_->logits.data() + r * vocab, vocab));
    }
    EXPECT_LE(worst, 1e-5) << when;
    EXPECT_EQ(run.tokens, reference_->tokens) << when;
    std::printf("%s: worst row error %.3g over %zu rows\n", when, worst,
                run.logits.size() / static_cast<size_t>(vocab));
  }

  static constexpr size_t kSteps = 8;
  static inline std::string setUpError_;
  static inline Checkpoint *checkpoint_ = nullptr;
  static inline std::filesystem::path planPath_;
  static inline std::vector<uint8_t> twoBytes_;
  static inline GreedyRun *reference_ = nullptr;
};

TEST_P(LockstepGpu, TwoProcessesGiveTheOneRankLogitsAndSurviveAWorkerKilledMidGeneration) {
  std::unique_ptr<Engine> engine = rankZero();
  ASSERT_NE(engine, nullptr);
  auto *lockstep = dynamic_cast<runtime::LockstepEngine *>(engine.get());
  ASSERT_NE(lockstep, nullptr);
  const int64_t vocab = engine->vocabSize();

  auto worker = std::make_unique<Worker>(planPath_, lockstep->port(), workerDevice());
  ASSERT_TRUE(lockstep->waitForWorkers(120000).ok()) << lockstep->health().toString();
  Expected<GreedyRun> first = greedyRun(*engine, prompt(), kSteps);
  ASSERT_TRUE(first.ok()) << first.status().toString();
  expectReference(*first, vocab, "first worker");

  // Decode until the call in flight when the worker dies fails. The kill comes after a few steps,
  // while decoding goes on: whichever part of a step it lands in (a collective on the GPU, the
  // command broadcast, the outcome exchange), the failure must name rank 1 and come from its
  // death, not from the 60 s timeout.
  Expected<int> slot = engine->newSequence();
  ASSERT_TRUE(slot.ok()) << slot.status().toString();
  Expected<std::vector<float>> logits = engine->prefill(*slot, prompt());
  ASSERT_TRUE(logits.ok()) << logits.status().toString();
  std::atomic<int> decoded{0};
  std::thread killer([&] {
    while (decoded.load() < 3) {
      std::this_thread::yield();
    }
    worker->kill();
  });
  int32_t next = argmax(logits->data() + logits->size() - vocab, vocab);
  Status failure = Status::success();
  const int64_t room = engine->plan().state_pool()->max_context() - 64;
  for (int64_t step = static_cast<int64_t>(prompt().size()); step < room; ++step) {
    logits = engine->decode(std::span(&*slot, 1), std::span(&next, 1));
    if (!logits.ok()) {
      failure = logits.status();
      break;
    }
    next = argmax(logits->data(), vocab);
    decoded.fetch_add(1);
  }
  decoded.store(1 << 30); // releases the killer should decoding have failed before it struck
  killer.join();
  engine->endSequence(*slot);
  ASSERT_FALSE(failure.ok()) << "every step succeeded although the worker was killed";
  EXPECT_EQ(failure.code(), StatusCode::Unavailable) << failure.toString();
  EXPECT_NE(failure.message().find("rank 1"), std::string::npos) << failure.toString();
  EXPECT_EQ(failure.message().find("within"), std::string::npos)
      << "failed by the timeout, not by noticing the worker's death: " << failure.toString();
  EXPECT_FALSE(engine->health().ok());
  std::printf("the call in flight failed with: %s\n", failure.message().c_str());

  // A restarted worker is admitted, the group forms again, and the run is the same.
  worker = std::make_unique<Worker>(planPath_, lockstep->port(), workerDevice());
  ASSERT_TRUE(lockstep->waitForWorkers(120000).ok()) << lockstep->health().toString();
  Expected<GreedyRun> again = greedyRun(*engine, prompt(), kSteps);
  ASSERT_TRUE(again.ok()) << again.status().toString();
  expectReference(*again, vocab, "restarted worker");
}

INSTANTIATE_TEST_SUITE_P(Transports, LockstepGpu,
                         ::testing::Values(DeviceTransport::Tcp, DeviceTransport::Nccl),
                         [](const ::testing::TestParamInfo<DeviceTransport> &info) {
                           return std::string(runtime::deviceTransportName(info.param));
                         });

} // namespace
} // namespace glm::testing
