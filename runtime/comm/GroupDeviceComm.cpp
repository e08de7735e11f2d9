// A new device transport for each TCP group that forms.
#include "runtime/comm/GroupDeviceComm.h"

#include "runtime/comm/NcclComm.h"
#include "runtime/comm/StagedDeviceComm.h"

#include <chrono>
#include <thread>

namespace glm::runtime {

Expected<DeviceTransport> parseDeviceTransport(const std::string &name) {
  if (name == "nccl") {
    return DeviceTransport::Nccl;
  }
  if (name == "tcp") {
    return DeviceTransport::Tcp;
  }
  return invalidArgument("the device transport is nccl or tcp, got '", name, "'");
}

const char *deviceTransportName(DeviceTransport transport) {
  return transport == DeviceTransport::Nccl ? "nccl" : "tcp";
}

GroupDeviceComm::GroupDeviceComm(TcpComm &control, int device, DeviceTransport transport,
                                 int timeoutMs)
    : control_(control), device_(device), transport_(transport), timeoutMs_(timeoutMs) {}

GroupDeviceComm::~GroupDeviceComm() {
  // The engine that used it has waited for its stream and may have destroyed it (CudaEngine's
  // destructor, before it lets go of this): nothing to wait for, and no stream to ask.
  lastStream_ = nullptr;
  drop("the tensor-parallel rank is shutting down");
}

void GroupDeviceComm::drop(const std::string &why) {
  if (comm_ == nullptr) {
    return;
  }
  // The staged transport waits for its stream in every collective: nothing of it can be running.
  auto *nccl = dynamic_cast<NcclComm *>(comm_.get());
  bool idle = nccl == nullptr || lastStream_ == nullptr;
  if (nccl != nullptr) {
    // Local only (ncclCommAbort): the group it belonged to is gone or being replaced. (The staged
    // transport's abort would end the control group instead, which is the new group's.)
    nccl->abort(Status(StatusCode::Unavailable, why));
    // An aborted NCCL kernel leaves the stream promptly; the communicator's buffers are freed only
    // after that. The query runs in the stream's context, which may not be this thread's yet.
    if (!idle && nccl->context().makeCurrent().ok()) {
      const cuda::CudaDriver &d = nccl->context().driver();
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!idle && std::chrono::steady_clock::now() < until) {
        // Done, or failed (the context is then unusable anyway): nothing left running.
        idle = d.cuStreamQuery(lastStream_) != cuda::kErrorNotReady;
        if (!idle) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
    }
  }
  if (idle) {
    comm_.reset();
  } else {
    // Still running after the abort (a driver fault): leaked rather than freed under a kernel.
    (void)comm_.release();
  }
  lastStream_ = nullptr;
}

Status GroupDeviceComm::form() {
  drop("the tensor-parallel group formed again");
  uint32_t chosen = rank() == 0 ? static_cast<uint32_t>(transport_) : 0;
  GLM_RETURN_IF_ERROR(control_.broadcast(&chosen, sizeof chosen)
                          .withContext("agreeing on the tensor-parallel device transport"));
  if (chosen != static_cast<uint32_t>(DeviceTransport::Nccl) &&
      chosen != static_cast<uint32_t>(DeviceTransport::Tcp)) {
    return Status(StatusCode::Unimplemented,
                  strCat("rank 0 chose device transport ", chosen, ", which rank ", rank(),
                         " does not know: run the same glmc on every rank"));
  }
  const auto transport = static_cast<DeviceTransport>(chosen);
  if (transport == DeviceTransport::Tcp) {
    comm_ = std::make_unique<StagedDeviceComm>(control_);
  } else {
    NcclCommOptions options;
    options.timeoutMs = timeoutMs_;
    options.watch = [this] { return control_.checkPeers("an NCCL collective"); };
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> made,
                         NcclComm::create(control_, device_, std::move(options)));
    comm_ = std::move(made);
  }
  return Status::success();
}

Expected<DeviceComm *> GroupDeviceComm::current() {
  if (comm_ == nullptr) {
    return Status(StatusCode::Unavailable,
                  strCat("tensor-parallel rank ", rank(), " of ", world(),
                         " is not in a formed group (its device transport is not set up)"));
  }
  return comm_.get();
}

Status GroupDeviceComm::allReduceDevice(void *buffer, size_t count, CommElement element,
                                        cuda::CUstream stream) {
  GLM_ASSIGN_OR_RETURN(DeviceComm * comm, current());
  lastStream_ = stream;
  return comm->allReduceDevice(buffer, count, element, stream);
}

Status GroupDeviceComm::allGatherDevice(const void *piece, void *out, size_t rows, size_t width,
                                        int axis, CommElement element, cuda::CUstream stream) {
  GLM_ASSIGN_OR_RETURN(DeviceComm * comm, current());
  lastStream_ = stream;
  return comm->allGatherDevice(piece, out, rows, width, axis, element, stream);
}

Status GroupDeviceComm::synchronize(cuda::CUstream stream) {
  GLM_ASSIGN_OR_RETURN(DeviceComm * comm, current());
  return comm->synchronize(stream);
}

void GroupDeviceComm::abort(const Status &why) {
  if (auto *nccl = dynamic_cast<NcclComm *>(comm_.get()); nccl != nullptr) {
    nccl->abort(why);
  }
  control_.disconnect(why.message());
}

} // namespace glm::runtime
