// All ranks as threads of one process: what the tests and single-machine runs of TP plans use, on
// the CPU (host collectives) and on one GPU (device collectives between CUDA engines sharing it).
#pragma once

#include "runtime/comm/Comm.h"
#include "runtime/comm/DeviceComm.h"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace glm::runtime {

class LoopbackComm;

/// The shared meeting point of one group of loopback ranks. Each rank's thread calls its own
/// LoopbackComm; a collective returns once every rank has joined it.
///
/// Failure: the group ends when a rank gives up (LoopbackComm::abort or disconnect) or when the
/// ranks meet in different collectives (out of step: one rank failed a call the others are still
/// in). Every collective waiting then, and every later one, fails with Unavailable and the reason,
/// so no rank waits for good on a rank that will not come. A group does not restart.
class LoopbackGroup {
public:
  explicit LoopbackGroup(int world);
  /// The communicator of rank `rank`; the group must outlive it.
  std::unique_ptr<LoopbackComm> comm(int rank);
  int world() const { return world_; }
  /// Ends the group (the first reason is kept).
  void end(const std::string &why);
  /// Why the group ended, or "" while it works.
  std::string failure() const;

private:
  friend class LoopbackComm;
  /// What a rank is calling. Ranks must meet in the same collective of the same size: the bytes
  /// each reads of the others' buffers follow from it.
  struct Call {
    const char *what = "";
    size_t rows = 0, width = 0, elementBytes = 0;
    int axis = 0;
    bool operator==(const Call &) const = default;
  };
  /// Publishes rank `rank`'s buffer and waits for every rank's; then checks that all called the
  /// same collective (ending the group if not).
  Status join(int rank, const void *data, const Call &call);
  /// Waits for every rank to arrive; fails once the group has ended.
  Status arrive();
  Status ended() const; // the caller holds mutex_

  const int world_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t phase_ = 0; // counts completed meetings
  std::string failure_;
  std::vector<const void *> inputs_;
  std::vector<Call> calls_;
  std::vector<float> scratch_;
};

/// One rank of a LoopbackGroup.
///
/// Device collectives are for ranks whose CUDA engines share one GPU through its primary context
/// (as glm::cuda::CudaContext makes it), so that every rank's device pointers are valid in every
/// other's stream. Each waits for the calling rank's stream first and returns once the result is
/// in place. All-reduce stages through host memory: every rank's buffer is summed in f32 in rank
/// order, as the host allReduce does (bf16 buffers are widened, summed, and rounded to bf16 once),
/// so every rank gets the same bits. All-gather copies device to device, straight from the other
/// ranks' pieces.
class LoopbackComm : public GroupComm, public DeviceComm {
public:
  LoopbackComm(LoopbackGroup &group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return group_.world_; }

  Status allReduce(float *buffer, size_t count) override;
  Status allGather(const float *piece, float *out, size_t rows, size_t width, int axis) override;
  Status broadcast(void *buffer, size_t bytes) override;

  /// Every other rank once the group has ended, else none.
  std::vector<int> missingRanks() const override;
  std::string lastError() const override { return group_.failure(); }
  void disconnect(const std::string &why) override { group_.end(why); }

  Status allReduceDevice(void *buffer, size_t count, CommElement element,
                         cuda::CUstream stream) override;
  Status allGatherDevice(const void *piece, void *out, size_t rows, size_t width, int axis,
                         CommElement element, cuda::CUstream stream) override;
  Status synchronize(cuda::CUstream stream) override;
  void abort(const Status &why) override;

private:
  /// The host all-reduce behind both allReduce and allReduceDevice.
  Status reduce(float *buffer, size_t count, const LoopbackGroup::Call &call);
  /// A failed driver call on this rank: ends the group (the other ranks would otherwise wait in
  /// this collective for good) and returns the error.
  Status fail(Status status);

  LoopbackGroup &group_;
  int rank_;
  std::vector<float> sum_; // allReduceDevice's host copy of the buffer, widened to f32
  HostStaging staging_;
};

} // namespace glm::runtime
