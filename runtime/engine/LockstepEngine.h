// Tensor parallelism: rank 0's engine, wrapped so that before each engine call it tells every
// worker rank (over the communicator's broadcast) to make the same call on its own engine, which
// keeps the collectives inside the plan paired up across ranks (lockstep). The workers are other
// processes (TcpComm) or threads of this one (LoopbackComm).
#pragma once

#include "runtime/comm/LoopbackComm.h"
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensors.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace glm::runtime {

struct LockstepCommand; // one engine call on the wire (LockstepEngine.cpp)

/// What a rank proves to rank 0 before it may join: a hash of the plan file's bytes and a hash of
/// the checkpoint's config.json and tensor table (names, dtypes, shapes, byte sizes) and of the
/// load-time ablation, if any. The weight bytes themselves are known only once loaded: a rank
/// adds their digest (WeightDigest) with withWeightDigest.
std::string lockstepIdentity(const PlanFile &plan, const Checkpoint &checkpoint,
                             const Ablation *ablation = nullptr);
/// `identity` with the digest of the weight bytes a rank loaded (WeightDigest::hex): rank 0
/// admits a worker only when it equals the digest of that rank's part that rank 0 computed.
std::string withWeightDigest(const std::string &identity, const std::string &digest);

/// OK when `theirs` (rank `rank`'s identity) equals `ours`; otherwise an error that says which
/// half differs.
Status compareLockstepIdentity(int rank, const std::string &theirs, const std::string &ours);

struct LockstepOptions {
  /// An idle rank 0 pings the workers this often, so that a dead worker shows on /health without
  /// traffic, and the workers (whose waits time out after the TcpComm timeout) know rank 0 lives.
  int heartbeatMs = 1000;
  /// Where joins, refusals and lost ranks are reported (default: stderr). With ranks in this
  /// process, their threads report their failed calls through it too.
  std::function<void(const std::string &)> log;
  /// Run on rank 0 each time the group of processes forms, before any engine call, while every
  /// worker runs its own (runLockstepWorker's `formGroup`) at the same point: what a group needs
  /// set up by all its ranks together, such as the NCCL communicator of GroupDeviceComm::form.
  /// It may use `control`'s collectives. A failure on any rank ends the group. Not used by ranks
  /// in this process (their communicators exist from the start).
  std::function<Status(Comm &control)> formGroup;
  /// The digest of the weight bytes each rank loads (index: rank; WeightDigest::hex of rank 0's
  /// load, which computes every rank's): a worker must present its own in its identity. Empty:
  /// not checked (a worker's digest is then ignored).
  std::vector<std::string> weightDigests;
};

class LockstepEngine : public Engine {
public:
  /// `local` is rank 0's engine, created with `comm` (rank 0 of a listening TcpComm) as its
  /// communicator; workers must present `identity` to join. A monitor thread admits workers,
  /// pings idle ones, and re-admits them after a failure.
  static Expected<std::unique_ptr<LockstepEngine>> create(std::unique_ptr<TcpComm> comm,
                                                          std::unique_ptr<Engine> local,
                                                          std::string identity,
                                                          LockstepOptions options = {});
  /// Makes rank r's engine of an in-process group with `comm`, rank r's communicator (the
  /// lockstep engine owns it, and it outlives the engine).
  using RankEngineFactory = std::function<Expected<std::unique_ptr<Engine>>(LoopbackComm &comm)>;
  /// All `world` ranks as threads of this process, meeting in a LoopbackGroup: makes each rank's
  /// engine with `make` (on the calling thread, rank 0 first), then runs ranks 1..world-1 on
  /// threads of their own that replay rank 0's calls. When a rank fails in the middle of a call,
  /// the group ends and every later call is Unavailable with the reason (health() says it too):
  /// threads of one process do not rejoin. The destructor ends the threads.
  static Expected<std::unique_ptr<LockstepEngine>>
  createInProcess(int world, const RankEngineFactory &make, LockstepOptions options = {});
  ~LockstepEngine() override;

  Expected<int> newSequence() override;
  void endSequence(int slot) override;
  int64_t length(int slot) const override;
  int64_t pagesNeeded(int slot, int64_t more) const override;
  int64_t freePages() const override;
  int64_t pageTokens() const override;
  /// Verify windows (speculative decoding): every rank runs the step and each rollback; rank 0
  /// draws with the requests' settings, the workers greedily (their draws are not read).
  Expected<std::vector<std::vector<SampledToken>>>
  runWindows(std::span<const VerifyWindow> windows) override;
  Status rollbackWindow(int slot, int64_t length) override;
  Expected<std::vector<float>> prefill(int slot, std::span<const int32_t> tokens,
                                       LogitRows rows = LogitRows::All) override;
  Expected<std::vector<float>> decode(std::span<const int> slots,
                                      std::span<const int32_t> tokens) override;
  /// Rank 0 samples with the request's settings; the workers run the same programs greedily
  /// (their tokens are not read: rank 0's go out, and come back as the next step's input).
  Expected<SampledToken> prefillSample(int slot, std::span<const int32_t> tokens,
                                       const RowSampling &sampling,
                                       std::vector<float> *logits = nullptr,
                                       LogitRows rows = LogitRows::Last) override;
  Expected<std::vector<SampledToken>> decodeSample(std::span<const int> slots,
                                                   std::span<const int32_t> tokens,
                                                   std::span<const RowSampling> sampling,
                                                   std::vector<float> *logits = nullptr) override;
  Expected<int> forkSequence(int from) override;
  Expected<int> keepState(int slot) override;
  Status resumeState(int kept, int slot) override;
  void dropState(int kept) override;
  int64_t keptLength(int kept) const override;
  int64_t pagesOnlyKept() const override;
  const plan::Plan &plan() const override { return local_->plan(); }
  /// Unavailable, naming the missing ranks, until every worker has joined; for ranks in this
  /// process, once their group has ended, with the reason.
  Status health() const override;

  /// Waits until every worker has joined; Unavailable after `timeoutMs`.
  Status waitForWorkers(int timeoutMs);
  /// The port workers connect to (0 for ranks in this process).
  int port() const { return listener_ != nullptr ? listener_->port() : 0; }

private:
  LockstepEngine(std::unique_ptr<GroupComm> comm, std::unique_ptr<Engine> local,
                 std::string identity, LockstepOptions options);
  Status clearSlots(int) override { return Status::success(); }     // newSequence is forwarded
  Status copyState(int, int) override { return Status::success(); } // forkSequence is forwarded
  void monitor();
  /// A group of processes has just formed: every rank runs its formGroup. The caller holds mutex_.
  Status form();
  /// Sends a call to the workers. The caller holds mutex_.
  Status begin(const LockstepCommand &command, std::span<const int32_t> payload);
  /// After the local call: every rank reports whether its call succeeded; a disagreement ends
  /// the group, since the ranks' states have diverged. Returns `local` when all agree.
  Status finish(const Status &local, const char *call);
  /// The group broke: record it and return the error the caller reports.
  Status lost(const Status &why);
  /// Unavailable, naming them, while ranks are missing (health() without the forming check, which
  /// the calls that form the group must pass).
  Status connected() const;
  /// Whether `slot` was opened in the current group (a slot opened before the group broke has
  /// no state on the workers any more).
  Status checkCurrent(int slot) const;
  void log(const std::string &message) const;

  // In-process ranks (createInProcess): the group outlives every communicator, each communicator
  // its engine (members are destroyed in reverse order).
  std::unique_ptr<LoopbackGroup> group_;
  std::vector<std::unique_ptr<LoopbackComm>> workerComms_;
  // comm_ outlives local_, whose collectives use it.
  std::unique_ptr<GroupComm> comm_;
  TcpComm *listener_ = nullptr; // comm_ when the workers are processes: admission, the port
  std::unique_ptr<Engine> local_;
  std::vector<std::unique_ptr<Engine>> workerEngines_;
  std::vector<std::thread> workers_;
  std::string identity_;
  LockstepOptions options_;
  mutable std::mutex mutex_; // one engine call (or ping, or admission) at a time
  std::condition_variable joined_;
  uint64_t generation_ = 0;                // counts the times the full group formed
  std::map<int, uint64_t> slotGeneration_; // the generation each open slot belongs to
  std::map<int, uint64_t> keptGeneration_; // likewise for kept states
  std::chrono::steady_clock::time_point lastCall_;
  std::atomic<bool> stopping_{false};
  /// Whether the group of processes has formed (every rank ran its formGroup) since it last
  /// became complete; health() reports a group that is complete but not yet formed as forming.
  std::atomic<bool> formed_{false};
  std::thread monitor_;
};

/// A worker rank's side: runs the calls rank 0 sends on `engine` (this rank's engine, created with
/// `comm`) until the connection to rank 0 ends, and returns why it ended. Sequences it opened
/// are ended, so a rejoin starts from no sequences. Failed calls are reported through `log`.
/// When the group forms, runs `formGroup` (see LockstepOptions::formGroup); if that fails here
/// it returns at once with that error and the connection still up: this rank cannot take part,
/// and rejoining would fail again.
Status runLockstepWorker(Comm &comm, Engine &engine,
                         const std::function<void(const std::string &)> &log = {},
                         const std::function<Status(Comm &control)> &formGroup = {});

} // namespace glm::runtime
