// Loopback collectives: each rank publishes a pointer and what it is calling, waits for the others,
// reads theirs. The meeting is a barrier that a failure can break.
#include "runtime/comm/LoopbackComm.h"

#include <cstring>

namespace glm::runtime {

namespace {

std::string describe(const char *what, size_t rows, size_t width, size_t elementBytes, int axis) {
  return strCat(what, " of [", rows, ", ", width, "] ", elementBytes, "-byte elements",
                axis != 0 ? strCat(" along axis ", axis) : "");
}

} // namespace

LoopbackGroup::LoopbackGroup(int world)
    : world_(world), inputs_(static_cast<size_t>(world), nullptr),
      calls_(static_cast<size_t>(world)) {}

std::unique_ptr<LoopbackComm> LoopbackGroup::comm(int rank) {
  return std::make_unique<LoopbackComm>(*this, rank);
}

void LoopbackGroup::end(const std::string &why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) {
    failure_ = why.empty() ? "ended without a reason" : why;
  }
  changed_.notify_all();
}

std::string LoopbackGroup::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

Status LoopbackGroup::ended() const {
  return Status(StatusCode::Unavailable,
                strCat("the loopback group of ", world_, " ranks ended: ", failure_));
}

Status LoopbackGroup::arrive() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!failure_.empty()) {
    return ended();
  }
  const uint64_t phase = phase_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    ++phase_;
    changed_.notify_all();
    return Status::success();
  }
  changed_.wait(lock, [&] { return phase_ != phase || !failure_.empty(); });
  // A meeting that completed before the group ended still counts.
  return phase_ != phase ? Status::success() : ended();
}

Status LoopbackGroup::join(int rank, const void *data, const Call &call) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty()) {
      return ended();
    }
    inputs_[static_cast<size_t>(rank)] = data;
    calls_[static_cast<size_t>(rank)] = call;
  }
  GLM_RETURN_IF_ERROR(arrive());
  // Every rank compares every call, so all of them see a mismatch and none goes on to read a
  // buffer of the wrong size. Every collective starts with this meeting, so as long as the
  // earlier ones matched, the ranks meet here at the same point.
  for (size_t r = 1; r < calls_.size(); ++r) {
    if (!(calls_[r] == calls_[0])) {
      const Call &a = calls_[0], &b = calls_[r];
      const std::string why =
          strCat("ranks out of step: rank 0 called ",
                 describe(a.what, a.rows, a.width, a.elementBytes, a.axis), ", rank ", r,
                 " called ", describe(b.what, b.rows, b.width, b.elementBytes, b.axis));
      end(why);
      return Status(StatusCode::Unavailable, why);
    }
  }
  return Status::success();
}

Status LoopbackComm::reduce(float *buffer, size_t count, const LoopbackGroup::Call &call) {
  GLM_RETURN_IF_ERROR(group_.join(rank_, buffer, call));
  // Rank 0 sums in rank order into the shared scratch; everyone copies it out.
  if (rank_ == 0) {
    const auto *first = static_cast<const float *>(group_.inputs_[0]);
    group_.scratch_.assign(first, first + count);
    for (size_t r = 1; r < group_.inputs_.size(); ++r) {
      const auto *in = static_cast<const float *>(group_.inputs_[r]);
      for (size_t i = 0; i < count; ++i) {
        group_.scratch_[i] += in[i];
      }
    }
  }
  GLM_RETURN_IF_ERROR(group_.arrive());
  std::memcpy(buffer, group_.scratch_.data(), count * sizeof(float));
  return group_.arrive(); // nobody reuses the scratch before all have read it
}

Status LoopbackComm::allReduce(float *buffer, size_t count) {
  return reduce(buffer, count, {"an all-reduce", count, 1, sizeof(float), 0});
}

Status LoopbackComm::allGather(const float *piece, float *out, size_t rows, size_t width,
                               int axis) {
  if (axis != 0 && axis != 1) {
    return invalidArgument("loopback all-gather along axis ", axis, " of a 2-D tensor");
  }
  GLM_RETURN_IF_ERROR(
      group_.join(rank_, piece, {"an all-gather", rows, width, sizeof(float), axis}));
  const size_t world = group_.inputs_.size();
  for (size_t r = 0; r < world; ++r) {
    const auto *in = static_cast<const float *>(group_.inputs_[r]);
    if (axis == 0) {
      std::memcpy(out + r * rows * width, in, rows * width * sizeof(float));
      continue;
    }
    for (size_t row = 0; row < rows; ++row) {
      std::memcpy(out + row * world * width + r * width, in + row * width, width * sizeof(float));
    }
  }
  return group_.arrive(); // inputs stay valid until everyone has copied them
}

Status LoopbackComm::broadcast(void *buffer, size_t bytes) {
  GLM_RETURN_IF_ERROR(group_.join(rank_, buffer, {"a broadcast", 1, bytes, 1, 0}));
  if (rank_ != 0) {
    std::memcpy(buffer, group_.inputs_[0], bytes);
  }
  return group_.arrive(); // rank 0's buffer stays valid until everyone has copied it
}

std::vector<int> LoopbackComm::missingRanks() const {
  std::vector<int> missing;
  if (!group_.failure().empty()) {
    for (int r = 0; r < group_.world_; ++r) {
      if (r != rank_) {
        missing.push_back(r);
      }
    }
  }
  return missing;
}

Status LoopbackComm::fail(Status status) {
  Status named = status.withContext(strCat("loopback rank ", rank_, " of ", group_.world_));
  group_.end(named.message());
  return named;
}

void LoopbackComm::abort(const Status &why) {
  group_.end(strCat("rank ", rank_, " failed: ", why.message()));
}

Status LoopbackComm::synchronize(cuda::CUstream stream) {
  GLM_ASSIGN_OR_RETURN(const cuda::CudaDriver *d, cuda::driver());
  return cuda::check(d->cuStreamSynchronize(stream), "cuStreamSynchronize");
}

Status LoopbackComm::allReduceDevice(void *buffer, size_t count, CommElement element,
                                     cuda::CUstream stream) {
  Expected<const cuda::CudaDriver *> loaded = cuda::driver();
  if (!loaded.ok()) {
    return fail(loaded.status());
  }
  // The buffer once the work enqueued before the collective has written it.
  if (Status s = staging_.download(**loaded, buffer, count, element, stream, sum_); !s.ok()) {
    return fail(s.withContext("reading a device all-reduce's buffer"));
  }
  GLM_RETURN_IF_ERROR(
      reduce(sum_.data(), count, {"a device all-reduce", count, 1, commElementBytes(element), 0}));
  if (Status s = staging_.upload(**loaded, sum_, count, buffer, element, stream); !s.ok()) {
    return fail(s.withContext("writing a device all-reduce's sum"));
  }
  return Status::success();
}

Status LoopbackComm::allGatherDevice(const void *piece, void *out, size_t rows, size_t width,
                                     int axis, CommElement element, cuda::CUstream stream) {
  if (axis != 0 && axis != 1) {
    return invalidArgument("loopback all-gather along axis ", axis, " of a 2-D tensor");
  }
  Expected<const cuda::CudaDriver *> loaded = cuda::driver();
  if (!loaded.ok()) {
    return fail(loaded.status());
  }
  const cuda::CudaDriver &d = **loaded;
  // Other ranks read this rank's piece as soon as they meet it here: it must be written by then.
  if (Status s = cuda::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize"); !s.ok()) {
    return fail(s.withContext("finishing a device all-gather's piece"));
  }
  GLM_RETURN_IF_ERROR(group_.join(
      rank_, piece, {"a device all-gather", rows, width, commElementBytes(element), axis}));
  Status copied = Status::success();
  for (int r = 0; r < group_.world_ && copied.ok(); ++r) {
    copied = placeGatheredPiece(d, group_.inputs_[static_cast<size_t>(r)], out, r, group_.world_,
                                rows, width, axis, element, stream);
  }
  if (copied.ok()) {
    copied = cuda::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  }
  if (!copied.ok()) {
    return fail(copied.withContext("copying a device all-gather's pieces"));
  }
  return group_.arrive(); // every piece stays unchanged until everyone has copied it
}

} // namespace glm::runtime
