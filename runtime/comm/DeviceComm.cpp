// Placing one rank's piece of a device all-gather, and staging device buffers through the host.
#include "runtime/comm/DeviceComm.h"

#include "kernels/common/FloatFormats.h"

namespace glm::runtime {

Status placeGatheredPiece(const cuda::CudaDriver &driver, const void *piece, void *out, int r,
                          int world, size_t rows, size_t width, int axis, CommElement element,
                          cuda::CUstream stream) {
  const size_t rowBytes = width * commElementBytes(element);
  const auto src = reinterpret_cast<cuda::CUdeviceptr>(piece);
  const auto dst = reinterpret_cast<cuda::CUdeviceptr>(out);
  const size_t rank = static_cast<size_t>(r);
  if (axis == 0 || rows == 1) {
    // Whole pieces one after another (axis 1 of one row is the same layout).
    const cuda::CUdeviceptr at = dst + rank * rows * rowBytes;
    if (at != src) {
      GLM_CU(&driver, cuMemcpyDtoDAsync(at, src, rows * rowBytes, stream));
    }
    return Status::success();
  }
  // Axis 1: row i of the piece goes to columns [r width, (r + 1) width) of out's row i.
  cuda::Memcpy2D copy;
  copy.srcMemoryType = cuda::kMemoryTypeDevice;
  copy.srcDevice = src;
  copy.srcPitch = rowBytes;
  copy.dstMemoryType = cuda::kMemoryTypeDevice;
  copy.dstDevice = dst;
  copy.dstXInBytes = rank * rowBytes;
  copy.dstPitch = static_cast<size_t>(world) * rowBytes;
  copy.WidthInBytes = rowBytes;
  copy.Height = rows;
  GLM_CU(&driver, cuMemcpy2DAsync(&copy, stream));
  return Status::success();
}

Status HostStaging::download(const cuda::CudaDriver &driver, const void *buffer, size_t count,
                             CommElement element, cuda::CUstream stream, std::vector<float> &host) {
  host.resize(count);
  if (count == 0) {
    return Status::success();
  }
  const bool f32 = element == CommElement::F32;
  bf16_.resize(f32 ? 0 : count);
  void *to = f32 ? static_cast<void *>(host.data()) : bf16_.data();
  GLM_CU(&driver, cuMemcpyDtoHAsync(to, reinterpret_cast<cuda::CUdeviceptr>(buffer),
                                    count * commElementBytes(element), stream));
  GLM_CU(&driver, cuStreamSynchronize(stream));
  if (!f32) {
    for (size_t i = 0; i < count; ++i) {
      host[i] = kernels::bf16ToFloat(bf16_[i]);
    }
  }
  return Status::success();
}

Status HostStaging::upload(const cuda::CudaDriver &driver, const std::vector<float> &host,
                           size_t count, void *buffer, CommElement element,
                           cuda::CUstream stream) {
  if (count == 0) {
    return Status::success();
  }
  const bool f32 = element == CommElement::F32;
  if (!f32) {
    bf16_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      bf16_[i] = kernels::floatToBf16(host[i]);
    }
  }
  const void *from = f32 ? static_cast<const void *>(host.data()) : bf16_.data();
  GLM_CU(&driver, cuMemcpyHtoDAsync(reinterpret_cast<cuda::CUdeviceptr>(buffer), from,
                                    count * commElementBytes(element), stream));
  // The host buffers are the next collective's: the copy must be done before they change.
  GLM_CU(&driver, cuStreamSynchronize(stream));
  return Status::success();
}

} // namespace glm::runtime
