// Collectives between processes through NCCL, one GPU per rank, with NCCL loaded by dlopen.
#pragma once

#include "runtime/comm/Comm.h"
#include "runtime/comm/DeviceComm.h"
#include "runtime/cuda/CudaContext.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace glm::runtime {

/// NCCL's entry points as loaded (NcclApi.h, filled by NcclComm.cpp).
struct NcclApi;
struct UniqueId;

/// The version code of the NCCL library NcclComm would load (ncclGetVersion: 22809 for 2.28.9),
/// or why it cannot be loaded. Needs no GPU.
///
/// The library is GLM_NCCL's path when that variable is set, else libnccl.so.2, else libnccl.so
/// (the CUDA toolkit's copy, found through the loader's path).
Expected<int> ncclVersion();

struct NcclCommOptions {
  /// How long a host-pointer collective (or synchronize(), or create()'s ncclCommInitRank) waits
  /// for the other ranks before it aborts the communicator and fails; 0 waits forever. NCCL itself
  /// never times out a collective, so without this a rank that died or stalled would hang the
  /// others. Like TcpCommOptions::timeoutMs, it must exceed the longest stretch of computation
  /// between two collectives.
  int timeoutMs = 30000;
  /// Called while those waits wait, about once a millisecond: an error fails the wait (and
  /// aborts the communicator) with that error. NCCL does not notice a peer process that dies
  /// during a collective over NVLink or PCIe, whose kernel then waits for good; ranks that are
  /// processes watch their control connections here (TcpComm::checkPeers) so that a dead peer
  /// fails the wait at once rather than after timeoutMs.
  std::function<Status()> watch;
};

/// One rank's NCCL communicator on one CUDA device: a drop-in Comm, and a DeviceComm whose
/// collectives are enqueued on the caller's stream (the CUDA engine's, in a `glmc worker`).
///
/// NCCL's own environment variables (NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_IB_*, NCCL_P2P_*,
/// NCCL_NVLS_ENABLE, ...) are honoured because NcclComm sets none of them: in particular it never
/// touches NCCL_NVLS_ENABLE, so whether NVLink multicast is used is the environment's choice.
///
/// Sums: NCCL reduces in its ring or tree order, not LoopbackComm's rank order, so allReduce
/// equals the loopback result only within float rounding (about 1e-6 relative for a few ranks;
/// bf16 sums are rounded to bf16 at each hop, where the loopback rounds once), and the bits may
/// differ between world sizes, algorithms and NCCL versions. Tests comparing a TP run over NCCL
/// with loopback must use a tolerance.
///
/// Failure: a collective that fails, or whose wait sees NCCL's asynchronous error or outlasts
/// the timeout, aborts the communicator (ncclCommAbort), so that every later call fails at once
/// with the reason. A rank that fails during create() tells the others through the control
/// channel before NCCL starts, so no rank then waits in ncclCommInitRank for it; a rank lost inside
/// ncclCommInitRank fails create() under the timeout and the watch, like a collective. (NCCL sets
/// up a collective's connections at its first use, inside the call: a peer stopped there is
/// still waited for without a bound.)
///
/// Not thread-safe: one thread drives a communicator, as with the other Comms. Any thread may
/// call it; each call makes the device's primary context current on the calling thread.
class NcclComm : public Comm, public DeviceComm {
public:
  /// Joins the NCCL group of `control.world()` ranks as rank `control.rank()` on CUDA device
  /// `device` (an ordinal; NcclComm makes the device's primary context current, the context that
  /// glm::cuda::CudaContext and the CUDA engine use). Rank 0 creates the NCCL unique id and
  /// broadcasts it through `control` (the TCP control channel; any Comm of the same ranks will
  /// do: a world-1 LoopbackGroup for a single rank). Every rank must call create() at the same
  /// point of its use of `control`. Unavailable, naming what is missing, on a machine without
  /// NCCL, without the CUDA driver or without that device.
  static Expected<std::unique_ptr<NcclComm>> create(Comm &control, int device,
                                                    NcclCommOptions options = {});
  /// Destroys the communicator (ncclCommAbort instead once it has failed). Work enqueued by the
  /// *Device collectives must be complete: synchronize their streams first.
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  /// The host-pointer Comm collectives stage through a device scratch buffer on this
  /// communicator's own stream and return once the result is in host memory (bounded by
  /// NcclCommOptions::timeoutMs). allGather supports both axes, the axis-1 interleave being done
  /// on the host.
  Status allReduce(float *buffer, size_t count) override;
  Status allGather(const float *piece, float *out, size_t rows, size_t width, int axis) override;
  Status broadcast(void *buffer, size_t bytes) override;

  /// DeviceComm, through ncclAllReduce and ncclAllGather (ncclFloat32 or ncclBfloat16), enqueued
  /// on `stream`; they return at once. NCCL concatenates whole pieces, which is axis 0 (and axis 1
  /// of one row, the decode gathers); axis 1 of several rows gathers into a device scratch buffer
  /// of this communicator and places each rank's columns from there with strided copies on
  /// `stream` (growing that buffer waits for `stream` first).
  Status allReduceDevice(void *buffer, size_t count, CommElement element,
                         cuda::CUstream stream) override;
  Status allGatherDevice(const void *piece, void *out, size_t rows, size_t width, int axis,
                         CommElement element, cuda::CUstream stream) override;
  /// Aborts the communicator (see Failure above): the other ranks' collectives then fail when
  /// their waits see NCCL's error or the timeout.
  void abort(const Status &why) override { (void)fail(why); }

  /// In place: device `buffer` (`bytes` long on every rank) becomes rank 0's. Enqueued on
  /// `stream`.
  Status broadcastDevice(void *buffer, size_t bytes, cuda::CUstream stream);

  /// Waits for `stream` while watching NCCL's asynchronous error and the timeout:
  /// cuStreamSynchronize would hang for good on a collective whose peer is gone. Aborts the
  /// communicator on failure.
  Status synchronize(cuda::CUstream stream) override;

  /// The device context this communicator runs on, and its stream (the one the host-pointer
  /// collectives use).
  cuda::CudaContext &context() { return *context_; }
  /// Why the communicator was aborted, or "" while it works.
  const std::string &lastError() const { return lastError_; }
  /// The loaded entry points and this rank's ncclComm_t (null once destroyed or aborted), for
  /// glm-comm-bench to time bare NCCL calls on the same communicator (NcclApi.h). Named
  /// ncclComm(), not handle(): NcclComm.cpp's calls of its free handle() would find a member
  /// of that name first.
  const NcclApi &api() const { return *api_; }
  void *ncclComm() const { return comm_; }

private:
  NcclComm(const NcclApi *api, std::unique_ptr<cuda::CudaContext> context, int rank, int world,
           NcclCommOptions options);
  /// Fails once the communicator is aborted; makes the context current.
  Status ready();
  /// Aborts the communicator and records why; returns `status`, naming this rank.
  Status fail(Status status);
  /// fail() unless `result` (an ncclResult_t) is success; `call` names the NCCL call.
  Status checkCall(int result, const char *call);
  /// Polls `done` until it is true, watching the peers about once a millisecond; fails (aborting
  /// the communicator) with its error, the watch's, or after NcclCommOptions::timeoutMs, saying
  /// that `what` did not finish.
  Status waitUntil(const char *what, const std::function<Expected<bool>()> &done);
  /// create()'s ncclCommInitRank with rank 0's `id`, bounded like the collectives.
  Status initRank(const UniqueId &id, int device);
  Status ensureScratch(size_t bytes);
  /// The device all-gather's scratch of at least `bytes`; growing it first waits for `stream`,
  /// whose enqueued work may still use the old one.
  Status ensureGatherScratch(size_t bytes, cuda::CUstream stream);

  const NcclApi *api_;
  std::unique_ptr<cuda::CudaContext> context_; // declared first: outlives the scratch below
  cuda::DeviceMemory scratch_;                 // the host-pointer collectives' staging
  cuda::DeviceMemory gatherScratch_;           // allGatherDevice along axis 1 of several rows
  std::vector<float> hostScratch_;
  void *comm_ = nullptr; // ncclComm_t; null once destroyed or aborted
  int rank_;
  int world_;
  NcclCommOptions options_;
  std::string lastError_;
};

} // namespace glm::runtime
