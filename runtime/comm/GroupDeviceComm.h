// A process rank's device communicator across the lives of its TCP group: `glmc serve
// --tp-listen` and `glmc worker` running a GPU plan.
#pragma once

#include "runtime/comm/DeviceComm.h"
#include "runtime/comm/TcpComm.h"

#include <memory>
#include <string>

namespace glm::runtime {

/// How device collectives travel between ranks that are processes.
enum class DeviceTransport : uint32_t {
  /// NCCL (NcclComm), one GPU per rank: NVLink or PCIe on one host, the network between hosts.
  Nccl = 1,
  /// Staged through host memory over the group's TCP connections (StagedDeviceComm): needs no
  /// NCCL and works for ranks sharing a GPU, at the cost of a GPU stall and two network hops per
  /// collective.
  Tcp = 2,
};

/// "nccl" or "tcp".
Expected<DeviceTransport> parseDeviceTransport(const std::string &name);
const char *deviceTransportName(DeviceTransport transport);

/// TCP groups form, break and form again as workers come and go, while an NCCL communicator
/// belongs to one group (every rank sets it up together, and one that lost a peer is aborted).
/// So each group that forms gets a new transport, which this object forwards to; its rank and
/// world are the control group's and never change, so a CUDA engine can be created over it
/// (loading its rank's weights) before any group has formed.
///
/// Until form() succeeds, and after the group breaks, collectives fail with Unavailable.
class GroupDeviceComm : public DeviceComm {
public:
  /// `control` is this rank's TcpComm (not owned; it outlives this), `device` the CUDA ordinal of
  /// this rank's engine, `transport` rank 0's choice (a worker takes rank 0's, whatever it is
  /// given), `timeoutMs` how long an NCCL wait may last (NcclCommOptions::timeoutMs).
  GroupDeviceComm(TcpComm &control, int device, DeviceTransport transport, int timeoutMs);
  /// Aborts the current transport.
  ~GroupDeviceComm() override;

  /// Sets up a newly formed group's transport, dropping the previous group's. Every rank calls it
  /// at the same point of its use of `control` (LockstepOptions::formGroup on rank 0, the
  /// `formGroup` of runLockstepWorker on the workers): rank 0 sends the transport first, then the
  /// ranks set it up together. NCCL errors that no retry mends (a GPU shared by two ranks, NCCL
  /// missing on a worker) come back as other than Unavailable.
  Status form();

  int rank() const override { return control_.rank(); }
  int world() const override { return control_.world(); }
  Status allReduceDevice(void *buffer, size_t count, CommElement element,
                         cuda::CUstream stream) override;
  Status allGatherDevice(const void *piece, void *out, size_t rows, size_t width, int axis,
                         CommElement element, cuda::CUstream stream) override;
  Status synchronize(cuda::CUstream stream) override;
  /// Aborts the transport and ends the control group, so that the other ranks (waiting in a TCP
  /// collective, or in an NCCL one whose wait watches the control connections) fail at once.
  void abort(const Status &why) override;

private:
  /// The current transport, or Unavailable when no group is formed.
  Expected<DeviceComm *> current();
  /// Aborts and destroys the current transport once the last stream it was given is idle.
  void drop(const std::string &why);

  TcpComm &control_;
  int device_;
  DeviceTransport transport_;
  int timeoutMs_;
  std::unique_ptr<DeviceComm> comm_;    // NcclComm or StagedDeviceComm; null until formed
  cuda::CUstream lastStream_ = nullptr; // what drop() waits for before freeing NCCL's buffers
};

} // namespace glm::runtime
