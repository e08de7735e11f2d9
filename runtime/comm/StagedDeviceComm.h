// Device collectives staged through host memory over any group of processes (TCP): the transport
// for GPU ranks that have no NCCL between them, or that share one GPU.
#pragma once

#include "runtime/comm/Comm.h"
#include "runtime/comm/DeviceComm.h"

#include <vector>

namespace glm::runtime {

/// Each device collective waits for the calling rank's stream, copies its buffer to the host,
/// runs `host`'s host collective (a TcpComm: a star through rank 0, summing in rank order, so
/// every rank gets the same bits, and the loopback group's too), and copies the result back.
/// Correct everywhere and slow: every collective stalls the GPU and takes two network hops.
/// It exists for machines without NCCL and for testing process ranks on one GPU; NcclComm is the
/// transport for speed.
///
/// Failure: `host`'s failures end its group; a failed copy here ends it too (abort), so no peer
/// waits on this rank for good.
class StagedDeviceComm : public DeviceComm {
public:
  /// `host` (not owned) must outlive this.
  explicit StagedDeviceComm(GroupComm &host) : host_(host) {}
  int rank() const override { return host_.rank(); }
  int world() const override { return host_.world(); }
  Status allReduceDevice(void *buffer, size_t count, CommElement element,
                         cuda::CUstream stream) override;
  Status allGatherDevice(const void *piece, void *out, size_t rows, size_t width, int axis,
                         CommElement element, cuda::CUstream stream) override;
  /// Every collective has waited for its stream already; this waits for the work after the last.
  Status synchronize(cuda::CUstream stream) override;
  void abort(const Status &why) override { host_.disconnect(why.message()); }

private:
  /// Ends the group after a failed copy and returns the error.
  Status fail(const Status &why);

  GroupComm &host_;
  HostStaging staging_;
  std::vector<float> buffer_, gathered_;
};

} // namespace glm::runtime
