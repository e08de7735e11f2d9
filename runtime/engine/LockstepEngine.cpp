// The lockstep protocol. Each engine call on rank 0 becomes: broadcast of a 16-byte command
// (op, slot, count, logit rows), broadcast of its int32 payload (prefill tokens; decode slots then
// tokens; a verify step's windows), the call on every rank, and a one-float-per-rank all-gather of
// "did your call succeed". Idle, rank 0 sends Ping commands, which are just the last step.
#include "runtime/engine/LockstepEngine.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace glm::runtime {

namespace {

enum class Op : uint32_t {
  Ping = 1,
  NewSequence = 2,
  EndSequence = 3,
  Prefill = 4,
  Decode = 5,
  Form = 6,      // the group has formed: every rank runs its formGroup
  Fork = 7,      // slot: the sequence forked; count: rank 0's new slot
  Keep = 8,      // slot: the sequence kept; count: rank 0's kept-state id
  Resume = 9,    // slot: the new sequence; count: the kept-state id it resumes
  Drop = 10,     // count: the kept-state id dropped
  Windows = 11,  // count: payload ints; rows: windows (a verify step, runWindows)
  Rollback = 12, // slot: the sequence rolled back; count: the length it goes back to
};

/// What lockstepIdentity presents, so that ranks that would not understand each other's commands
/// (a glmc of another protocol version) are refused at the door. 2: the Form command. 3: Fork,
/// and prefill / decode calls that sample (rows = 2). 4: Keep, Resume and Drop (kept states).
/// 5: Windows and Rollback (speculative decoding's verify steps).
constexpr int kLockstepProtocol = 5;

constexpr uint32_t kMaxCommandCount = 1u << 24;

const char *opName(uint32_t op) {
  switch (static_cast<Op>(op)) {
  case Op::Ping:
    return "ping";
  case Op::NewSequence:
    return "newSequence";
  case Op::EndSequence:
    return "endSequence";
  case Op::Prefill:
    return "prefill";
  case Op::Decode:
    return "decode";
  case Op::Form:
    return "forming the group";
  case Op::Fork:
    return "forkSequence";
  case Op::Keep:
    return "keepState";
  case Op::Resume:
    return "resumeState";
  case Op::Drop:
    return "dropState";
  case Op::Windows:
    return "a verify step";
  case Op::Rollback:
    return "rollbackWindow";
  }
  return "an unknown call";
}

/// FNV-1a, 64 bits: a fingerprint to catch mismatched files, not a defence against forgery.
struct Fnv1a {
  uint64_t hash = 0xcbf29ce484222325ull;
  void add(const void *data, size_t n) {
    const auto *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < n; ++i) {
      hash = (hash ^ p[i]) * 0x100000001b3ull;
    }
  }
  template <typename T> void addValue(const T &value) { add(&value, sizeof value); }
};

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

/// The value of `key=` in an identity string ("plan=... weights=...").
std::string field(const std::string &identity, const std::string &key) {
  const size_t at = identity.find(key + "=");
  if (at == std::string::npos) {
    return "";
  }
  const size_t from = at + key.size() + 1;
  return identity.substr(from, identity.find(' ', from) - from);
}

void defaultLog(const std::string &message) { std::fprintf(stderr, "glmc: %s\n", message.c_str()); }

} // namespace

struct LockstepCommand {
  uint32_t op = 0;
  int32_t slot = -1;
  uint32_t count = 0; // prefill: tokens; decode: sequences
  uint32_t rows = 0;  // prefill: 0 all rows' logits, 1 the last row's (LogitRows); prefill
                      // and decode: 2 the sampled tokens (prefillSample, decodeSample)
};

/// What a worker samples with: greedy, nothing applied. Its tokens are never read.
const SamplingParams kWorkerSampling{};
constexpr uint32_t kSampledRows = 2;

/// A verify step's payload: per window its slot, known-token count and draft count, then every
/// window's known tokens and drafts in order.
std::vector<int32_t> windowsPayload(std::span<const VerifyWindow> windows) {
  std::vector<int32_t> payload;
  for (const VerifyWindow &w : windows) {
    payload.insert(payload.end(), {w.slot, static_cast<int32_t>(w.known.size()),
                                   static_cast<int32_t>(w.drafts.size())});
  }
  for (const VerifyWindow &w : windows) {
    payload.insert(payload.end(), w.known.begin(), w.known.end());
    payload.insert(payload.end(), w.drafts.begin(), w.drafts.end());
  }
  return payload;
}

/// The windows of a payload of `count` windows, their slots mapped by `local`, all sampling with
/// `sampling`; the spans point into `payload`. Unavailable when the counts overrun it (rank 0 and
/// this rank no longer agree on the protocol).
template <typename Local>
Expected<std::vector<VerifyWindow>> windowsOf(std::span<const int32_t> payload, uint32_t count,
                                              const Local &local, RowSampling sampling) {
  std::vector<VerifyWindow> windows;
  size_t at = 3 * size_t{count};
  for (uint32_t i = 0; i < count && at <= payload.size(); ++i) {
    const int32_t known = payload[3 * i + 1], drafts = payload[3 * i + 2];
    if (known < 0 || drafts < 0 || payload.size() - at < size_t(known) + size_t(drafts)) {
      break;
    }
    windows.push_back({local(payload[3 * i]), payload.subspan(at, size_t(known)),
                       payload.subspan(at + size_t(known), size_t(drafts)), sampling});
    at += size_t(known) + size_t(drafts);
  }
  if (windows.size() != count || at != payload.size()) {
    return Status(StatusCode::Unavailable, "rank 0 sent a verify step whose windows overrun it");
  }
  return windows;
}

std::string lockstepIdentity(const PlanFile &plan, const Checkpoint &checkpoint,
                             const Ablation *ablation) {
  Fnv1a planHash;
  planHash.add(plan.bytes().data(), plan.bytes().size());
  Fnv1a weightsHash;
  // Bounded: a regular file within kMaxConfigJsonBytes (one that cannot be read, which loading the
  // model refused before this, hashes as empty, as a missing one always did).
  Expected<std::string> config = readConfigJson(checkpoint.directory() / "config.json");
  const std::string configText = config.ok() ? *config : std::string();
  weightsHash.add(configText.data(), configText.size());
  for (const TensorView *t : checkpoint.tensors()) {
    weightsHash.add(t->name.data(), t->name.size() + 1);
    weightsHash.addValue(static_cast<int32_t>(t->dtype));
    weightsHash.addValue(static_cast<uint64_t>(t->shape.size()));
    for (int64_t d : t->shape) {
      weightsHash.addValue(d);
    }
    weightsHash.addValue(t->byteSize);
  }
  // An ablation changes the weights a rank holds as much as other bytes would.
  if (ablation != nullptr) {
    weightsHash.add(ablation->direction.data(), ablation->direction.size() * sizeof(float));
    weightsHash.addValue(ablation->firstLayer);
    weightsHash.addValue(ablation->lastLayer);
    weightsHash.addValue(ablation->mtpLayer);
    weightsHash.addValue(ablation->alpha);
  }
  return strCat("lockstep=", kLockstepProtocol, " plan=", hex(planHash.hash),
                " weights=", hex(weightsHash.hash));
}

std::string withWeightDigest(const std::string &identity, const std::string &digest) {
  return digest.empty() ? identity : strCat(identity, " bytes=", digest);
}

namespace {

/// `identity` without its weight digest.
std::string withoutDigest(const std::string &identity) {
  const size_t at = identity.find(" bytes=");
  if (at == std::string::npos) {
    return identity;
  }
  const size_t end = identity.find(' ', at + 1);
  return identity.substr(0, at) + (end == std::string::npos ? "" : identity.substr(end));
}

} // namespace

Status compareLockstepIdentity(int rank, const std::string &theirs, const std::string &ours) {
  // Identities without the field are protocol 1's.
  auto protocol = [](const std::string &identity) {
    const std::string version = field(identity, "lockstep");
    return version.empty() ? std::string("1") : version;
  };
  if (protocol(theirs) != protocol(ours)) {
    return invalidArgument("rank ", rank, " speaks lockstep protocol ", protocol(theirs),
                           ", rank 0 speaks ", protocol(ours), ": every rank needs the same glmc");
  }
  if (field(theirs, "plan") != field(ours, "plan")) {
    return invalidArgument("rank ", rank, " runs a different plan (hash ", field(theirs, "plan"),
                           ", rank 0's is ", field(ours, "plan"),
                           "): every rank needs the same PLAN.glmp");
  }
  if (field(theirs, "weights") != field(ours, "weights")) {
    return invalidArgument("rank ", rank, " has a different checkpoint (config.json and tensor ",
                           "table hash ", field(theirs, "weights"), ", rank 0's is ",
                           field(ours, "weights"), "): every rank needs the same model files");
  }
  // The weight bytes, when rank 0 knows what this rank's should be.
  if (const std::string expected = field(ours, "bytes"); !expected.empty()) {
    const std::string got = field(theirs, "bytes");
    if (got != expected) {
      return invalidArgument("rank ", rank, " holds different weight bytes (digest ",
                             got.empty() ? std::string("none") : got, " of what it loaded, rank 0 ",
                             "expects ", expected,
                             "): its model files differ from rank 0's under the same tensor names");
    }
  }
  if (withoutDigest(theirs) != withoutDigest(ours)) {
    return invalidArgument("rank ", rank, " presents '", theirs, "', rank 0 expects '", ours, "'");
  }
  return Status::success();
}

LockstepEngine::LockstepEngine(std::unique_ptr<GroupComm> comm, std::unique_ptr<Engine> local,
                               std::string identity, LockstepOptions options)
    : comm_(std::move(comm)), local_(std::move(local)), identity_(std::move(identity)),
      options_(std::move(options)), lastCall_(std::chrono::steady_clock::now()) {}

Expected<std::unique_ptr<LockstepEngine>> LockstepEngine::create(std::unique_ptr<TcpComm> comm,
                                                                 std::unique_ptr<Engine> local,
                                                                 std::string identity,
                                                                 LockstepOptions options) {
  if (!comm || !local || comm->rank() != 0) {
    return invalidArgument("a lockstep engine needs rank 0's communicator and engine");
  }
  TcpComm *listener = comm.get();
  std::unique_ptr<LockstepEngine> engine(new LockstepEngine(
      std::move(comm), std::move(local), std::move(identity), std::move(options)));
  engine->listener_ = listener;
  GLM_RETURN_IF_ERROR(engine->initCommon(engine->local_->plan(), "lockstep plan"));
  engine->monitor_ = std::thread([e = engine.get()] { e->monitor(); });
  return engine;
}

Expected<std::unique_ptr<LockstepEngine>>
LockstepEngine::createInProcess(int world, const RankEngineFactory &make, LockstepOptions options) {
  if (world < 1 || !make) {
    return invalidArgument("an in-process tensor-parallel group needs a world of at least one "
                           "rank and a way to make each rank's engine");
  }
  // Filled in place, so that a rank that fails to come up unwinds the ones before it in order.
  std::unique_ptr<LockstepEngine> engine(
      new LockstepEngine(nullptr, nullptr, "", std::move(options)));
  engine->group_ = std::make_unique<LoopbackGroup>(world);
  for (int r = 0; r < world; ++r) {
    std::unique_ptr<LoopbackComm> comm = engine->group_->comm(r);
    Expected<std::unique_ptr<Engine>> made = make(*comm);
    if (!made.ok()) {
      return made.status().withContext(strCat("tensor-parallel rank ", r, " of ", world));
    }
    if (r == 0) {
      engine->comm_ = std::move(comm);
      engine->local_ = std::move(made).value();
    } else {
      engine->workerComms_.push_back(std::move(comm));
      engine->workerEngines_.push_back(std::move(made).value());
    }
  }
  GLM_RETURN_IF_ERROR(engine->initCommon(engine->local_->plan(), "lockstep plan"));
  for (size_t i = 0; i < engine->workerEngines_.size(); ++i) {
    engine->workers_.emplace_back([e = engine.get(), i] {
      // Returns once the group ends (the engine closing, or a rank failing).
      (void)runLockstepWorker(*e->workerComms_[i], *e->workerEngines_[i],
                              [e](const std::string &message) { e->log(message); });
    });
  }
  return engine;
}

LockstepEngine::~LockstepEngine() {
  stopping_ = true;
  if (monitor_.joinable()) {
    monitor_.join();
  }
  if (!workers_.empty()) {
    // The worker threads wait for rank 0's next command: ending the group releases them.
    comm_->disconnect("the tensor-parallel engine was closed");
    for (std::thread &worker : workers_) {
      worker.join();
    }
  }
}

void LockstepEngine::log(const std::string &message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    defaultLog(message);
  }
}

void LockstepEngine::monitor() {
  const auto heartbeat = std::chrono::milliseconds(options_.heartbeatMs);
  const int tickMs = std::max(1, std::min(100, options_.heartbeatMs / 4));
  auto admit = [this](int rank, const std::string &identity) {
    const size_t r = static_cast<size_t>(rank);
    return compareLockstepIdentity(rank, identity,
                                   withWeightDigest(identity_, r < options_.weightDigests.size()
                                                                   ? options_.weightDigests[r]
                                                                   : ""));
  };
  while (!stopping_) {
    // The handshakes are the tick. They run without the lock, so engine calls go on while a
    // connection takes its time: only one that has proven the shared secret is admitted, under
    // the lock, and that takes one small send.
    if (std::optional<Expected<TcpComm::Candidate>> done = listener_->handshake(tickMs)) {
      if (!done->ok()) {
        log(strCat("refused a tensor-parallel connection: ", done->status().message()));
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      Expected<int> rank = listener_->admit(std::move(**done), admit);
      if (!rank.ok()) {
        log(strCat("refused a tensor-parallel worker: ", rank.status().message()));
      } else {
        log(strCat("tensor-parallel rank ", *rank, " joined"));
        if (comm_->complete()) {
          // A new group: the workers hold no sequences, so those opened before are stale.
          ++generation_;
          formed_ = false;
          if (Status formed = form(); formed.ok()) {
            formed_ = true;
            lastCall_ = std::chrono::steady_clock::now();
            joined_.notify_all();
          } else {
            log(strCat("the tensor-parallel group could not form: ", formed.message()));
          }
        }
      }
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (comm_->complete() && std::chrono::steady_clock::now() - lastCall_ >= heartbeat) {
      LockstepCommand ping;
      ping.op = static_cast<uint32_t>(Op::Ping);
      if (begin(ping, {}).ok()) {
        (void)finish(Status::success(), "ping");
      }
    }
  }
}

Status LockstepEngine::form() {
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Form);
  GLM_RETURN_IF_ERROR(begin(command, {}));
  const Status local = options_.formGroup ? options_.formGroup(*comm_) : Status::success();
  const Status formed = finish(local, opName(command.op));
  if (!formed.ok() && comm_->complete()) {
    // Every rank failed alike, which finish() takes for a refused call; but a group that could
    // not form is no group: end it, so that health() says so and the ranks try again.
    return lost(formed);
  }
  return formed;
}

Status LockstepEngine::health() const {
  GLM_RETURN_IF_ERROR(connected());
  if (listener_ != nullptr && !formed_) {
    return Status(StatusCode::Unavailable,
                  strCat("the tensor-parallel group of ", comm_->world(), " ranks is forming"));
  }
  return Status::success();
}

Status LockstepEngine::connected() const {
  const std::vector<int> missing = comm_->missingRanks();
  if (missing.empty()) {
    return Status::success();
  }
  if (listener_ == nullptr) {
    return Status(StatusCode::Unavailable,
                  strCat("the tensor-parallel group of ", comm_->world(),
                         " ranks in this process ended: ", comm_->lastError()));
  }
  std::string ranks;
  for (int r : missing) {
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  const std::string last = comm_->lastError();
  return Status(StatusCode::Unavailable,
                strCat("tensor-parallel rank", missing.size() > 1 ? "s " : " ", ranks, " of ",
                       comm_->world(), missing.size() > 1 ? " are" : " is", " not connected",
                       last.empty() ? "" : " (last failure: " + last + ")"));
}

Status LockstepEngine::waitForWorkers(int timeoutMs) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!joined_.wait_for(lock, std::chrono::milliseconds(timeoutMs),
                        [&] { return comm_->complete() && (listener_ == nullptr || formed_); })) {
    return health();
  }
  return Status::success();
}

Status LockstepEngine::lost(const Status &why) {
  formed_ = false;
  comm_->disconnect(why.message());
  log(strCat("tensor-parallel group lost: ", why.message()));
  return Status(StatusCode::Unavailable, why.message());
}

Status LockstepEngine::begin(const LockstepCommand &command, std::span<const int32_t> payload) {
  if (Status h = connected(); !h.ok()) {
    return h;
  }
  LockstepCommand copy = command;
  if (Status s = comm_->broadcast(&copy, sizeof copy); !s.ok()) {
    return lost(s);
  }
  if (!payload.empty()) {
    std::vector<int32_t> data(payload.begin(), payload.end());
    if (Status s = comm_->broadcast(data.data(), data.size() * sizeof(int32_t)); !s.ok()) {
      return lost(s);
    }
  }
  return Status::success();
}

Status LockstepEngine::finish(const Status &local, const char *call) {
  if (!comm_->complete()) {
    // A collective inside the call failed and ended the group; its error names the rank.
    return lost(!local.ok() ? local : Status(StatusCode::Unavailable, comm_->lastError()));
  }
  const float mine = local.ok() ? 0.0f : 1.0f;
  std::vector<float> all(static_cast<size_t>(comm_->world()));
  if (Status s = comm_->allGather(&mine, all.data(), 1, 1, 1); !s.ok()) {
    return lost(s);
  }
  lastCall_ = std::chrono::steady_clock::now();
  std::vector<int> failed;
  for (int r = 1; r < comm_->world(); ++r) {
    if (all[static_cast<size_t>(r)] != 0.0f) {
      failed.push_back(r);
    }
  }
  const bool agree =
      local.ok() ? failed.empty() : static_cast<int>(failed.size()) == comm_->world() - 1;
  if (agree) {
    return local; // the same outcome everywhere (a refused call leaves every state unchanged)
  }
  if (!local.ok()) {
    (void)lost(
        Status(StatusCode::Unavailable,
               strCat("rank 0 failed ", call, " where other ranks succeeded: ", local.message())));
    return local;
  }
  return lost(
      Status(StatusCode::Unavailable, strCat("tensor-parallel rank ", failed.front(), " failed ",
                                             call, " where rank 0 succeeded (its log says why)")));
}

Status LockstepEngine::checkCurrent(int slot) const {
  auto it = slotGeneration_.find(slot);
  if (it != slotGeneration_.end() && it->second != generation_) {
    return Status(StatusCode::Unavailable,
                  strCat("sequence slot ", slot, " was lost when the tensor-parallel group broke"));
  }
  return Status::success();
}

Expected<int> LockstepEngine::newSequence() {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(health());
  GLM_ASSIGN_OR_RETURN(int slot, local_->newSequence());
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::NewSequence);
  command.slot = slot;
  Status s = begin(command, {});
  if (s.ok()) {
    s = finish(Status::success(), "newSequence");
  }
  if (!s.ok()) {
    local_->endSequence(slot);
    return s;
  }
  slotGeneration_[slot] = generation_;
  return slot;
}

void LockstepEngine::endSequence(int slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  local_->endSequence(slot);
  const bool current = checkCurrent(slot).ok();
  slotGeneration_.erase(slot);
  if (!current || !comm_->complete()) {
    return; // the workers dropped it when the group broke
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::EndSequence);
  command.slot = slot;
  if (begin(command, {}).ok()) {
    (void)finish(Status::success(), "endSequence");
  }
}

int64_t LockstepEngine::length(int slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_->length(slot);
}

int64_t LockstepEngine::pagesNeeded(int slot, int64_t more) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_->pagesNeeded(slot, more);
}

int64_t LockstepEngine::freePages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_->freePages();
}

int64_t LockstepEngine::pageTokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_->pageTokens();
}

Expected<std::vector<float>> LockstepEngine::prefill(int slot, std::span<const int32_t> tokens,
                                                     LogitRows rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(checkCurrent(slot));
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Prefill);
  command.slot = slot;
  command.count = static_cast<uint32_t>(tokens.size());
  command.rows = rows == LogitRows::Last ? 1 : 0;
  GLM_RETURN_IF_ERROR(begin(command, tokens));
  Expected<std::vector<float>> logits = local_->prefill(slot, tokens, rows);
  GLM_RETURN_IF_ERROR(finish(logits.status(), "prefill"));
  return logits;
}

Expected<std::vector<float>> LockstepEngine::decode(std::span<const int> slots,
                                                    std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int slot : slots) {
    GLM_RETURN_IF_ERROR(checkCurrent(slot));
  }
  if (slots.size() != tokens.size()) {
    return local_->decode(slots, tokens); // its error, before any rank is involved
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Decode);
  command.count = static_cast<uint32_t>(slots.size());
  std::vector<int32_t> payload(slots.begin(), slots.end());
  payload.insert(payload.end(), tokens.begin(), tokens.end());
  GLM_RETURN_IF_ERROR(begin(command, payload));
  Expected<std::vector<float>> logits = local_->decode(slots, tokens);
  GLM_RETURN_IF_ERROR(finish(logits.status(), "decode"));
  return logits;
}

Expected<SampledToken> LockstepEngine::prefillSample(int slot, std::span<const int32_t> tokens,
                                                     const RowSampling &sampling,
                                                     std::vector<float> *logits, LogitRows rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(checkCurrent(slot));
  GLM_RETURN_IF_ERROR(local_->checkSampling(*sampling.params)); // before any rank is involved
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Prefill);
  command.slot = slot;
  command.count = static_cast<uint32_t>(tokens.size());
  command.rows = kSampledRows;
  GLM_RETURN_IF_ERROR(begin(command, tokens));
  // The workers' logits are not read: theirs never leave the device.
  Expected<SampledToken> token = local_->prefillSample(slot, tokens, sampling, logits, rows);
  GLM_RETURN_IF_ERROR(finish(token.status(), "prefill"));
  return token;
}

Expected<std::vector<SampledToken>>
LockstepEngine::decodeSample(std::span<const int> slots, std::span<const int32_t> tokens,
                             std::span<const RowSampling> sampling, std::vector<float> *logits) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int slot : slots) {
    GLM_RETURN_IF_ERROR(checkCurrent(slot));
  }
  if (slots.size() != tokens.size() || slots.size() != sampling.size()) {
    // Its error, before any rank is involved.
    return local_->decodeSample(slots, tokens, sampling, logits);
  }
  for (const RowSampling &row : sampling) {
    GLM_RETURN_IF_ERROR(local_->checkSampling(*row.params));
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Decode);
  command.count = static_cast<uint32_t>(slots.size());
  command.rows = kSampledRows;
  std::vector<int32_t> payload(slots.begin(), slots.end());
  payload.insert(payload.end(), tokens.begin(), tokens.end());
  GLM_RETURN_IF_ERROR(begin(command, payload));
  Expected<std::vector<SampledToken>> sampled =
      local_->decodeSample(slots, tokens, sampling, logits);
  GLM_RETURN_IF_ERROR(finish(sampled.status(), "decode"));
  return sampled;
}

Expected<std::vector<std::vector<SampledToken>>>
LockstepEngine::runWindows(std::span<const VerifyWindow> windows) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const VerifyWindow &w : windows) {
    GLM_RETURN_IF_ERROR(checkCurrent(w.slot));
    if (w.sampling.params != nullptr) {
      GLM_RETURN_IF_ERROR(local_->checkSampling(*w.sampling.params));
    }
  }
  if (windows.empty()) {
    return local_->runWindows(windows); // its error, before any rank is involved
  }
  const std::vector<int32_t> payload = windowsPayload(windows);
  if (payload.size() > kMaxCommandCount) {
    return invalidArgument("a verify step of ", payload.size(), " tokens and counts is more than ",
                           kMaxCommandCount, " a lockstep command carries");
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Windows);
  command.count = static_cast<uint32_t>(payload.size());
  command.rows = static_cast<uint32_t>(windows.size());
  GLM_RETURN_IF_ERROR(begin(command, payload));
  Expected<std::vector<std::vector<SampledToken>>> drawn = local_->runWindows(windows);
  GLM_RETURN_IF_ERROR(finish(drawn.status(), "a verify step"));
  return drawn;
}

Status LockstepEngine::rollbackWindow(int slot, int64_t length) {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(checkCurrent(slot));
  if (length < 0 || length > local_->length(slot)) {
    return local_->rollbackWindow(slot, length); // its error, before any rank is involved
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Rollback);
  command.slot = slot;
  command.count = static_cast<uint32_t>(length);
  GLM_RETURN_IF_ERROR(begin(command, {}));
  return finish(local_->rollbackWindow(slot, length), "rollbackWindow");
}

Expected<int> LockstepEngine::forkSequence(int from) {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(health());
  GLM_RETURN_IF_ERROR(checkCurrent(from));
  GLM_ASSIGN_OR_RETURN(int slot, local_->forkSequence(from));
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Fork);
  command.slot = from;
  command.count = static_cast<uint32_t>(slot);
  Status s = begin(command, {});
  if (s.ok()) {
    s = finish(Status::success(), "forkSequence");
  }
  if (!s.ok()) {
    local_->endSequence(slot);
    return s;
  }
  slotGeneration_[slot] = generation_;
  return slot;
}

Expected<int> LockstepEngine::keepState(int slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(health());
  GLM_RETURN_IF_ERROR(checkCurrent(slot));
  GLM_ASSIGN_OR_RETURN(int kept, local_->keepState(slot));
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Keep);
  command.slot = slot;
  command.count = static_cast<uint32_t>(kept);
  Status s = begin(command, {});
  if (s.ok()) {
    s = finish(Status::success(), "keepState");
  }
  if (!s.ok()) {
    local_->dropState(kept);
    return s;
  }
  keptGeneration_[kept] = generation_;
  return kept;
}

Status LockstepEngine::resumeState(int kept, int slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  GLM_RETURN_IF_ERROR(checkCurrent(slot));
  if (auto it = keptGeneration_.find(kept);
      it == keptGeneration_.end() || it->second != generation_) {
    return Status(StatusCode::Unavailable,
                  strCat("kept state ", kept, " was lost when the tensor-parallel group broke"));
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Resume);
  command.slot = slot;
  command.count = static_cast<uint32_t>(kept);
  GLM_RETURN_IF_ERROR(begin(command, {}));
  return finish(local_->resumeState(kept, slot), "resumeState");
}

void LockstepEngine::dropState(int kept) {
  std::lock_guard<std::mutex> lock(mutex_);
  local_->dropState(kept);
  auto it = keptGeneration_.find(kept);
  const bool current = it != keptGeneration_.end() && it->second == generation_;
  if (it != keptGeneration_.end()) {
    keptGeneration_.erase(it);
  }
  if (!current || !comm_->complete()) {
    return; // the workers dropped it when the group broke
  }
  LockstepCommand command;
  command.op = static_cast<uint32_t>(Op::Drop);
  command.count = static_cast<uint32_t>(kept);
  if (begin(command, {}).ok()) {
    (void)finish(Status::success(), "dropState");
  }
}

int64_t LockstepEngine::keptLength(int kept) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_->keptLength(kept);
}

int64_t LockstepEngine::pagesOnlyKept() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_->pagesOnlyKept();
}

Status runLockstepWorker(Comm &comm, Engine &engine,
                         const std::function<void(const std::string &)> &log,
                         const std::function<Status(Comm &control)> &formGroup) {
  // Rank 0's slot numbers -> this engine's: after a rejoin, rank 0 may still hold stale slots
  // that this rank never saw, so the numbers need not agree.
  std::map<int, int> slots;
  auto local = [&](int slot) {
    auto it = slots.find(slot);
    return it == slots.end() ? -1 : it->second;
  };
  std::map<int, int> kept; // rank 0's kept-state ids -> this engine's, likewise
  auto localKept = [&](int id) {
    auto it = kept.find(id);
    return it == kept.end() ? -1 : it->second;
  };
  auto endAll = [&](Status why) {
    for (const auto &[remote, mine] : slots) {
      engine.endSequence(mine);
    }
    for (const auto &[remote, mine] : kept) {
      engine.dropState(mine);
    }
    return why;
  };
  std::vector<float> outcomes(static_cast<size_t>(comm.world()));
  while (true) {
    LockstepCommand command;
    if (Status s = comm.broadcast(&command, sizeof command); !s.ok()) {
      return endAll(s);
    }
    const auto op = static_cast<Op>(command.op);
    if (command.count > kMaxCommandCount) {
      return endAll(Status(StatusCode::Unavailable,
                           strCat("rank 0 sent a ", opName(command.op), " of ", command.count,
                                  " entries (at most ", kMaxCommandCount, ")")));
    }
    std::vector<int32_t> payload(op == Op::Prefill || op == Op::Windows ? command.count
                                 : op == Op::Decode                     ? 2 * size_t{command.count}
                                                                        : 0);
    if (!payload.empty()) {
      if (Status s = comm.broadcast(payload.data(), payload.size() * sizeof(int32_t)); !s.ok()) {
        return endAll(s);
      }
    }
    Status result;
    switch (op) {
    case Op::Ping:
      break;
    case Op::Form:
      result = formGroup ? formGroup(comm) : Status::success();
      break;
    case Op::NewSequence: {
      if (int old = local(command.slot); old >= 0) {
        engine.endSequence(old);
        slots.erase(command.slot);
      }
      Expected<int> slot = engine.newSequence();
      result = slot.status();
      if (slot.ok()) {
        slots[command.slot] = *slot;
      }
      break;
    }
    case Op::EndSequence:
      if (int mine = local(command.slot); mine >= 0) {
        engine.endSequence(mine);
        slots.erase(command.slot);
      }
      break;
    case Op::Prefill:
      result =
          command.rows == kSampledRows
              ? engine.prefillSample(local(command.slot), payload, {&kWorkerSampling, 0}).status()
              : engine
                    .prefill(local(command.slot), payload,
                             command.rows == 1 ? LogitRows::Last : LogitRows::All)
                    .status();
      break;
    case Op::Decode: {
      std::vector<int> mine;
      for (uint32_t i = 0; i < command.count; ++i) {
        mine.push_back(local(payload[i]));
      }
      const auto tokens = std::span<const int32_t>(payload).subspan(command.count, command.count);
      const std::vector<RowSampling> greedy(command.count, RowSampling{&kWorkerSampling, 0});
      result = command.rows == kSampledRows ? engine.decodeSample(mine, tokens, greedy).status()
                                            : engine.decode(mine, tokens).status();
      break;
    }
    case Op::Fork: {
      const int remote = static_cast<int>(command.count);
      if (int old = local(remote); old >= 0) {
        engine.endSequence(old);
        slots.erase(remote);
      }
      Expected<int> slot = engine.forkSequence(local(command.slot));
      result = slot.status();
      if (slot.ok()) {
        slots[remote] = *slot;
      }
      break;
    }
    case Op::Keep: {
      const int remote = static_cast<int>(command.count);
      if (int old = localKept(remote); old >= 0) {
        engine.dropState(old);
        kept.erase(remote);
      }
      Expected<int> id = engine.keepState(local(command.slot));
      result = id.status();
      if (id.ok()) {
        kept[remote] = *id;
      }
      break;
    }
    case Op::Resume:
      result =
          localKept(static_cast<int>(command.count)) < 0
              ? Status(StatusCode::Unavailable,
                       strCat("kept state ", command.count, " is not on this rank"))
              : engine.resumeState(localKept(static_cast<int>(command.count)), local(command.slot));
      break;
    case Op::Drop:
      if (int mine = localKept(static_cast<int>(command.count)); mine >= 0) {
        engine.dropState(mine);
        kept.erase(static_cast<int>(command.count));
      }
      break;
    case Op::Windows: {
      Expected<std::vector<VerifyWindow>> windows =
          windowsOf(payload, command.rows, local, {&kWorkerSampling, 0});
      result = windows.ok() ? engine.runWindows(*windows).status() : windows.status();
      break;
    }
    case Op::Rollback:
      result = engine.rollbackWindow(local(command.slot), command.count);
      break;
    default:
      return endAll(
          Status(StatusCode::Unavailable, strCat("rank 0 sent unknown command ", command.op)));
    }
    if (!result.ok() && log) {
      log(strCat(opName(command.op), " failed on rank ", comm.rank(), ": ", result.message()));
    }
    const float mine = result.ok() ? 0.0f : 1.0f;
    if (Status s = comm.allGather(&mine, outcomes.data(), 1, 1, 1); !s.ok()) {
      return endAll(s);
    }
    if (op == Op::Form && !result.ok()) {
      return endAll(result); // the connection is still up: see the header
    }
  }
}

} // namespace glm::runtime
