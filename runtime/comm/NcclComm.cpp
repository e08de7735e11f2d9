// NCCL loaded with dlopen, the unique-id exchange over a control Comm, and the collectives.
#include "runtime/comm/NcclComm.h"

#include "runtime/comm/NcclApi.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

namespace glm::runtime {

using cuda::CUdeviceptr;
using cuda::CUstream;

namespace {

using Api = NcclApi;

Status resolve(void *lib, Api &api) {
  Status missing = Status::success();
  auto get = [&](auto &fn, const char *symbol, bool required) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (fn == nullptr && required && missing.ok()) {
      missing = Status(StatusCode::Unavailable,
                       strCat("NCCL (", api.path, ") has no ", symbol, " (library too old?)"));
    }
  };
  get(api.ncclGetVersion, "ncclGetVersion", true);
  get(api.ncclGetUniqueId, "ncclGetUniqueId", true);
  get(api.ncclCommInitRank, "ncclCommInitRank", true);
  get(api.ncclCommDestroy, "ncclCommDestroy", true);
  get(api.ncclCommAbort, "ncclCommAbort", true);
  get(api.ncclCommGetAsyncError, "ncclCommGetAsyncError", true);
  get(api.ncclAllReduce, "ncclAllReduce", true);
  get(api.ncclAllGather, "ncclAllGather", true);
  get(api.ncclBroadcast, "ncclBroadcast", true);
  get(api.ncclGetErrorString, "ncclGetErrorString", true);
  get(api.ncclGetLastError, "ncclGetLastError", false);
  return missing;
}

/// The library named by GLM_NCCL, or the default one, loaded once per path (a test may point
/// GLM_NCCL elsewhere; libraries are never unloaded).
Expected<const Api *> loadNccl() {
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::unique_ptr<Api>, Status>> loaded;
  const char *env = std::getenv("GLM_NCCL");
  const std::string override = env != nullptr ? env : "";
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = loaded.try_emplace(override);
  auto &[api, status] = it->second;
  if (fresh) {
    api = std::make_unique<Api>();
    void *lib = nullptr;
    std::string why;
    if (!override.empty()) {
      api->path = strCat(override, ", from GLM_NCCL");
      lib = dlopen(override.c_str(), RTLD_NOW | RTLD_LOCAL);
      why = lib == nullptr ? dlerror() : "";
    } else {
      api->path = "libnccl.so.2";
      lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
      why = lib == nullptr ? dlerror() : "";
      if (lib == nullptr) {
        lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        api->path = lib != nullptr ? "libnccl.so" : api->path;
      }
    }
    if (lib == nullptr) {
      status = Status(StatusCode::Unavailable,
                      strCat("NCCL (", api->path, ") is not installed: ", why,
                             "; multi-GPU plans need NCCL (set GLM_NCCL to its path)"));
    } else {
      status = resolve(lib, *api);
    }
  }
  if (!status.ok()) {
    return status;
  }
  return static_cast<const Api *>(api.get());
}

/// The Status for a failed NCCL call: a rank or the network gone is Unavailable, the rest
/// (invalid use, CUDA errors inside NCCL) Internal.
Status ncclError(const Api &api, int result, const char *call, NcclHandle comm) {
  const StatusCode code = (result == kNcclSystemError || result == kNcclRemoteError)
                              ? StatusCode::Unavailable
                              : StatusCode::Internal;
  std::string detail;
  if (comm != nullptr && api.ncclGetLastError != nullptr) {
    if (const char *last = api.ncclGetLastError(comm); last != nullptr && *last != '\0') {
      detail = strCat(": ", last);
    }
  }
  return Status(
      code, strCat(call, " failed: ", api.ncclGetErrorString(result), " (", result, ")", detail));
}

NcclHandle handle(void *comm) { return static_cast<NcclHandle>(comm); }

int ncclType(CommElement element) {
  return element == CommElement::F32 ? kNcclFloat32 : kNcclBfloat16;
}

} // namespace

Expected<int> ncclVersion() {
  GLM_ASSIGN_OR_RETURN(const Api *api, loadNccl());
  int version = 0;
  if (int r = api->ncclGetVersion(&version); r != kNcclSuccess) {
    return ncclError(*api, r, "ncclGetVersion", nullptr);
  }
  return version;
}

NcclComm::NcclComm(const Api *api, std::unique_ptr<cuda::CudaContext> context, int rank, int world,
                   NcclCommOptions options)
    : api_(api), context_(std::move(context)), rank_(rank), world_(world), options_(options) {}

Expected<std::unique_ptr<NcclComm>> NcclComm::create(Comm &control, int device,
                                                     NcclCommOptions options) {
  const int rank = control.rank();
  const int world = control.world();

  // Everything that can fail on one rank alone happens first, and the ranks agree on it through
  // the control channel before NCCL starts: a rank that went on to ncclCommInitRank while another
  // had given up would wait there for good.
  const Api *api = nullptr;
  std::unique_ptr<cuda::CudaContext> context;
  Status local = Status::success();
  if (device < 0) {
    local = invalidArgument("NcclComm on CUDA device ", device, " (an ordinal is >= 0)");
  }
  if (local.ok()) {
    Expected<const Api *> loaded = loadNccl();
    local = loaded.status();
    api = loaded.ok() ? *loaded : nullptr;
  }
  if (local.ok()) {
    Expected<std::unique_ptr<cuda::CudaContext>> made = cuda::CudaContext::create(device);
    if (made.ok()) {
      context = std::move(made).value();
    } else {
      // A driver that loads but finds no usable GPU fails cuInit with an Internal code; to the
      // caller it is the same missing resource as no driver at all.
      local = Status(StatusCode::Unavailable,
                     strCat("NcclComm needs CUDA device ", device, ": ", made.status().message()));
    }
  }
  if (world > 1) {
    float failed = local.ok() ? 0.0f : 1.0f;
    GLM_RETURN_IF_ERROR(
        control.allReduce(&failed, 1)
            .withContext(
                strCat("rank ", rank, " agreeing on NCCL setup over the control channel")));
    if (local.ok() && failed > 0.0f) {
      local = Status(StatusCode::Unavailable,
                     strCat(static_cast<int>(failed),
                            " other rank(s) could not set up NCCL (their logs say why)"));
    }
  }
  if (!local.ok()) {
    return local.withContext(strCat("NCCL rank ", rank, " of ", world));
  }

  // Rank 0's unique id reaches the others behind a flag byte that says whether rank 0 got one.
  std::vector<uint8_t> message(1 + kUniqueIdBytes, 0);
  UniqueId id{};
  if (rank == 0) {
    if (int r = api->ncclGetUniqueId(&id); r != kNcclSuccess) {
      local = ncclError(*api, r, "ncclGetUniqueId", nullptr);
    } else {
      message[0] = 1;
      std::memcpy(message.data() + 1, &id, kUniqueIdBytes);
    }
  }
  if (world > 1) {
    GLM_RETURN_IF_ERROR(control.broadcast(message.data(), message.size())
                            .withContext(strCat("rank ", rank, " receiving the NCCL unique id")));
  }
  if (local.ok() && message[0] == 0) {
    local = Status(StatusCode::Unavailable, "rank 0 could not create the NCCL unique id");
  }
  if (!local.ok()) {
    return local.withContext(strCat("NCCL rank ", rank, " of ", world));
  }
  std::memcpy(&id, message.data() + 1, kUniqueIdBytes);

  std::unique_ptr<NcclComm> comm(new NcclComm(api, std::move(context), rank, world, options));
  GLM_RETURN_IF_ERROR(comm->initRank(id, device));
  return comm;
}

namespace {

/// A blocking ncclCommInitRank on a thread of its own, and what became of it.
struct PendingInit {
  std::mutex mutex;
  bool finished = false;  // the init returned
  bool abandoned = false; // its caller stopped waiting: the thread disposes of what it made
  NcclHandle comm = nullptr;
  int result = kNcclSuccess;
  Status context = Status::success(); // the thread could not make the device current
};

} // namespace

Status NcclComm::initRank(const UniqueId &id, int device) {
  // ncclCommInitRank waits for every rank with no bound: a peer stopped after the id exchange
  // would hang this rank for good. So the init runs on a thread of its own while this one waits
  // under the timeout and the watch. A thread given up on aborts what its init makes, or stays
  // blocked in NCCL's bootstrap until the process ends. (NCCL's non-blocking init would bound
  // it too, but a non-blocking communicator makes every collective asynchronous: 65-73 us a call
  // back to back on two H200s, against 7-11 us. docs/performance.md.)
  auto pending = std::make_shared<PendingInit>();
  std::thread([pending, api = api_, world = world_, rank = rank_, id, device] {
    // ncclCommInitRank takes the device from the current context: the device's primary context,
    // held and current on this thread while it runs.
    Expected<std::unique_ptr<cuda::CudaContext>> context = cuda::CudaContext::create(device);
    NcclHandle made = nullptr;
    const int result = context.ok() ? api->ncclCommInitRank(&made, world, id, rank) : kNcclSuccess;
    std::lock_guard<std::mutex> lock(pending->mutex);
    if (pending->abandoned) {
      if (made != nullptr) {
        api->ncclCommAbort(made);
      }
      return;
    }
    pending->finished = true;
    pending->comm = made;
    pending->result = result;
    pending->context = context.status();
  }).detach();

  Status waited = waitUntil("ncclCommInitRank", [&]() -> Expected<bool> {
    std::lock_guard<std::mutex> lock(pending->mutex);
    return pending->finished;
  });
  std::lock_guard<std::mutex> lock(pending->mutex);
  if (!pending->finished) {
    pending->abandoned = true;
    return waited;
  }
  if (!waited.ok()) {
    // The watch failed as the init returned: the group is lost all the same.
    if (pending->comm != nullptr) {
      api_->ncclCommAbort(pending->comm);
    }
    return waited;
  }
  const std::string where = strCat("NCCL rank ", rank_, " of ", world_, " on CUDA device ", device,
                                   " (", context_->info().name, ")");
  if (!pending->context.ok()) {
    return pending->context.withContext(where);
  }
  if (pending->result != kNcclSuccess) {
    return ncclError(*api_, pending->result, "ncclCommInitRank", nullptr).withContext(where);
  }
  comm_ = pending->comm;
  return Status::success();
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) {
    return;
  }
  (void)context_->makeCurrent();
  // A communicator whose peers failed could hang in ncclCommDestroy's teardown; abort it instead.
  int async = kNcclSuccess;
  const int r = api_->ncclCommGetAsyncError(handle(comm_), &async);
  if (r != kNcclSuccess || (async != kNcclSuccess && async != kNcclInProgress)) {
    api_->ncclCommAbort(handle(comm_));
  } else {
    api_->ncclCommDestroy(handle(comm_));
  }
  comm_ = nullptr;
}

Status NcclComm::ready() {
  if (comm_ == nullptr) {
    return Status(StatusCode::Unavailable, strCat("the NCCL group ended: ", lastError_));
  }
  return context_->makeCurrent();
}

Status NcclComm::fail(Status status) {
  Status named = status.withContext(strCat("NCCL rank ", rank_, " of ", world_));
  if (comm_ != nullptr) {
    api_->ncclCommAbort(handle(comm_));
    comm_ = nullptr;
  }
  if (lastError_.empty()) {
    lastError_ = named.message();
  }
  return named;
}

Status NcclComm::checkCall(int result, const char *call) {
  if (result == kNcclSuccess) {
    return Status::success();
  }
  return fail(ncclError(*api_, result, call, handle(comm_)));
}

Status NcclComm::ensureScratch(size_t bytes) {
  if (scratch_.bytes() >= bytes) {
    return Status::success();
  }
  // Grows by doubling so that a series of slightly larger collectives reallocates rarely; the
  // stream is idle here (every host-pointer collective waits for its own work).
  GLM_ASSIGN_OR_RETURN(scratch_, context_->allocate(std::max(bytes, 2 * scratch_.bytes())));
  return Status::success();
}

Status NcclComm::waitUntil(const char *what, const std::function<Expected<bool>()> &done) {
  const auto start = std::chrono::steady_clock::now();
  auto watched = start;
  for (long spins = 0;; ++spins) {
    Expected<bool> finished = done();
    if (!finished.ok()) {
      return fail(finished.status());
    }
    if (*finished) {
      return Status::success();
    }
    const auto now = std::chrono::steady_clock::now();
    if (options_.watch && now - watched >= std::chrono::milliseconds(1)) {
      watched = now;
      if (Status s = options_.watch(); !s.ok()) {
        return fail(s);
      }
    }
    if (options_.timeoutMs > 0 && now - start > std::chrono::milliseconds(options_.timeoutMs)) {
      return fail(Status(StatusCode::Unavailable,
                         strCat(what, " did not finish within ", options_.timeoutMs,
                                " ms: another rank is gone or stalled")));
    }
    // Decode collectives take microseconds: spin briefly before sleeping between polls.
    if (spins < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

Status NcclComm::synchronize(CUstream stream) {
  GLM_RETURN_IF_ERROR(ready());
  const cuda::CudaDriver &driver = context_->driver();
  return waitUntil("an NCCL collective", [&]() -> Expected<bool> {
    const int query = driver.cuStreamQuery(stream);
    if (query == 0) {
      return true;
    }
    if (query != cuda::kErrorNotReady) {
      return cuda::check(query, "cuStreamQuery");
    }
    int async = kNcclSuccess;
    if (int r = api_->ncclCommGetAsyncError(handle(comm_), &async); r != kNcclSuccess) {
      return ncclError(*api_, r, "ncclCommGetAsyncError", handle(comm_));
    }
    if (async != kNcclSuccess && async != kNcclInProgress) {
      // A peer process that died shows both here and on the watch; the watch names the rank.
      if (options_.watch) {
        GLM_RETURN_IF_ERROR(options_.watch());
      }
      return ncclError(*api_, async, "a collective (reported by ncclCommGetAsyncError)",
                       handle(comm_));
    }
    return false;
  });
}

Status NcclComm::ensureGatherScratch(size_t bytes, CUstream stream) {
  if (gatherScratch_.bytes() >= bytes) {
    return Status::success();
  }
  GLM_RETURN_IF_ERROR(synchronize(stream));
  GLM_ASSIGN_OR_RETURN(gatherScratch_,
                       context_->allocate(std::max(bytes, 2 * gatherScratch_.bytes())));
  return Status::success();
}

Status NcclComm::allReduceDevice(void *buffer, size_t count, CommElement element, CUstream stream) {
  GLM_RETURN_IF_ERROR(ready());
  if (count == 0) {
    return Status::success();
  }
  return checkCall(api_->ncclAllReduce(buffer, buffer, count, ncclType(element), kNcclSum,
                                       handle(comm_), stream),
                   "ncclAllReduce");
}

Status NcclComm::allGatherDevice(const void *piece, void *out, size_t rows, size_t width, int axis,
                                 CommElement element, CUstream stream) {
  if (axis != 0 && axis != 1) {
    return invalidArgument("NCCL all-gather along axis ", axis, " of a 2-D tensor");
  }
  GLM_RETURN_IF_ERROR(ready());
  const size_t count = rows * width;
  if (count == 0) {
    return Status::success();
  }
  if (axis == 0 || rows == 1) {
    return checkCall(
        api_->ncclAllGather(piece, out, count, ncclType(element), handle(comm_), stream),
        "ncclAllGather");
  }
  // Axis 1 of several rows: whole pieces into the scratch, then each rank's rows to its columns.
  const size_t pieceBytes = count * commElementBytes(element);
  GLM_RETURN_IF_ERROR(ensureGatherScratch(static_cast<size_t>(world_) * pieceBytes, stream));
  GLM_RETURN_IF_ERROR(checkCall(api_->ncclAllGather(piece, gatherScratch_.as<void>(), count,
                                                    ncclType(element), handle(comm_), stream),
                                "ncclAllGather"));
  for (int r = 0; r < world_; ++r) {
    const uint8_t *gathered = gatherScratch_.as<uint8_t>() + static_cast<size_t>(r) * pieceBytes;
    if (Status s = placeGatheredPiece(context_->driver(), gathered, out, r, world_, rows, width,
                                      axis, element, stream);
        !s.ok()) {
      return fail(s);
    }
  }
  return Status::success();
}

Status NcclComm::broadcastDevice(void *buffer, size_t bytes, CUstream stream) {
  GLM_RETURN_IF_ERROR(ready());
  if (bytes == 0) {
    return Status::success();
  }
  return checkCall(api_->ncclBroadcast(buffer, buffer, bytes, kNcclUint8, 0, handle(comm_), stream),
                   "ncclBroadcast");
}

Status NcclComm::allReduce(float *buffer, size_t count) {
  GLM_RETURN_IF_ERROR(ready());
  const size_t bytes = count * sizeof(float);
  if (bytes == 0) {
    return Status::success();
  }
  GLM_RETURN_IF_ERROR(ensureScratch(bytes));
  GLM_RETURN_IF_ERROR(context_->upload(scratch_.ptr(), buffer, bytes));
  GLM_RETURN_IF_ERROR(
      allReduceDevice(scratch_.as<float>(), count, CommElement::F32, context_->stream()));
  // Waits before the download: a copy to pageable host memory would block unbounded.
  GLM_RETURN_IF_ERROR(synchronize(context_->stream()));
  return context_->download(buffer, scratch_.ptr(), bytes);
}

Status NcclComm::allGather(const float *piece, float *out, size_t rows, size_t width, int axis) {
  if (axis != 0 && axis != 1) {
    return invalidArgument("NCCL all-gather along axis ", axis, " of a 2-D tensor");
  }
  GLM_RETURN_IF_ERROR(ready());
  const size_t pieceFloats = rows * width;
  const size_t world = static_cast<size_t>(world_);
  if (pieceFloats == 0) {
    return Status::success();
  }
  GLM_RETURN_IF_ERROR(ensureScratch(world * pieceFloats * sizeof(float)));
  float *gathered = scratch_.as<float>();
  float *mine = gathered + static_cast<size_t>(rank_) * pieceFloats;
  GLM_RETURN_IF_ERROR(
      context_->upload(reinterpret_cast<CUdeviceptr>(mine), piece, pieceFloats * sizeof(float)));
  // Axis 0 in the gathered order: NCCL's in-place form, this rank's piece already at its place.
  GLM_RETURN_IF_ERROR(
      allGatherDevice(mine, gathered, rows, width, 0, CommElement::F32, context_->stream()));
  GLM_RETURN_IF_ERROR(synchronize(context_->stream()));
  if (axis == 0 || rows == 1) {
    return context_->download(out, scratch_.ptr(), world * pieceFloats * sizeof(float));
  }
  // Axis 1: rank r's rows [rows, width] go to columns [r width, (r + 1) width) of each row.
  hostScratch_.resize(world * pieceFloats);
  GLM_RETURN_IF_ERROR(
      context_->download(hostScratch_.data(), scratch_.ptr(), world * pieceFloats * sizeof(float)));
  for (size_t r = 0; r < world; ++r) {
    for (size_t row = 0; row < rows; ++row) {
      std::memcpy(out + row * world * width + r * width,
                  hostScratch_.data() + (r * rows + row) * width, width * sizeof(float));
    }
  }
  return Status::success();
}

Status NcclComm::broadcast(void *buffer, size_t bytes) {
  GLM_RETURN_IF_ERROR(ready());
  if (bytes == 0) {
    return Status::success();
  }
  GLM_RETURN_IF_ERROR(ensureScratch(bytes));
  if (rank_ == 0) {
    GLM_RETURN_IF_ERROR(context_->upload(scratch_.ptr(), buffer, bytes));
  }
  GLM_RETURN_IF_ERROR(broadcastDevice(scratch_.as<void>(), bytes, context_->stream()));
  GLM_RETURN_IF_ERROR(synchronize(context_->stream()));
  if (rank_ == 0) {
    return Status::success();
  }
  return context_->download(buffer, scratch_.ptr(), bytes);
}

} // namespace glm::runtime
