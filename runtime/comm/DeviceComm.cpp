// Placing one rank's piece of a device all-gather.
#include "runtime/comm/DeviceComm.h"

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

} // namespace glm::runtime
