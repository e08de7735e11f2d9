// Device collectives as host collectives between two copies.
#include "runtime/comm/StagedDeviceComm.h"

namespace glm::runtime {

Status StagedDeviceComm::fail(const Status &why) {
  abort(why);
  return why;
}

Status StagedDeviceComm::allReduceDevice(void *buffer, size_t count, CommElement element,
                                         cuda::CUstream stream) {
  GLM_ASSIGN_OR_RETURN(const cuda::CudaDriver *driver, cuda::driver());
  if (Status s = staging_.download(*driver, buffer, count, element, stream, buffer_); !s.ok()) {
    return fail(s.withContext("reading a device all-reduce's buffer"));
  }
  GLM_RETURN_IF_ERROR(host_.allReduce(buffer_.data(), count));
  if (Status s = staging_.upload(*driver, buffer_, count, buffer, element, stream); !s.ok()) {
    return fail(s.withContext("writing a device all-reduce's sum"));
  }
  return Status::success();
}

Status StagedDeviceComm::allGatherDevice(const void *piece, void *out, size_t rows, size_t width,
                                         int axis, CommElement element, cuda::CUstream stream) {
  if (axis != 0 && axis != 1) {
    return invalidArgument("device all-gather along axis ", axis, " of a 2-D tensor");
  }
  GLM_ASSIGN_OR_RETURN(const cuda::CudaDriver *driver, cuda::driver());
  const size_t count = rows * width;
  // `out` may hold `piece` (axis 0, in place): the piece is on the host before out is written.
  if (Status s = staging_.download(*driver, piece, count, element, stream, buffer_); !s.ok()) {
    return fail(s.withContext("reading a device all-gather's piece"));
  }
  gathered_.resize(count * static_cast<size_t>(world()));
  GLM_RETURN_IF_ERROR(host_.allGather(buffer_.data(), gathered_.data(), rows, width, axis));
  if (Status s = staging_.upload(*driver, gathered_, gathered_.size(), out, element, stream);
      !s.ok()) {
    return fail(s.withContext("writing a device all-gather's result"));
  }
  return Status::success();
}

Status StagedDeviceComm::synchronize(cuda::CUstream stream) {
  GLM_ASSIGN_OR_RETURN(const cuda::CudaDriver *driver, cuda::driver());
  return cuda::check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize");
}

} // namespace glm::runtime
