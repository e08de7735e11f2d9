// Collectives on device memory, ordered on a CUDA stream: what the CUDA engine runs between the
// CUDA graphs of a tensor-parallel program. LoopbackComm (ranks as threads sharing one GPU),
// NcclComm (a GPU per rank), StagedDeviceComm (through host memory over TCP) and GroupDeviceComm
// (whichever of the last two a group of processes formed with) implement it.
#pragma once

#include "base/Status.h"
#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace glm::runtime {

/// The element types device collectives move: a plan's activations are f32 or bf16.
enum class CommElement { F32, BF16 };

inline size_t commElementBytes(CommElement element) { return element == CommElement::F32 ? 4 : 2; }
inline const char *commElementName(CommElement element) {
  return element == CommElement::F32 ? "f32" : "bf16";
}

/// One rank's collectives on device memory. Each is ordered on `stream` after the work enqueued
/// before it; whether the call returns before the result is there depends on the transport (NCCL
/// enqueues and returns, the loopback waits), so callers read the result only after
/// synchronize(stream).
///
/// Not thread-safe: the rank's engine drives it from one thread at a time. Every rank must make the
/// same calls in the same order.
class DeviceComm {
public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  /// In place: `buffer` (`count` elements) becomes the sum over ranks. Sums are exact only up to
  /// the transport's order (see each implementation).
  virtual Status allReduceDevice(void *buffer, size_t count, CommElement element,
                                 cuda::CUstream stream) = 0;
  /// Rank r's piece [rows, width] lands in `out` at rank r's place along `axis`, as
  /// Comm::allGather lays it out (axis 1: columns [r width, (r + 1) width) of out [rows, world
  /// width]; axis 0: rank r's rows after rank r-1's). `out` must not overlap `piece` except as
  /// out + rank * rows * width == piece with axis 0.
  virtual Status allGatherDevice(const void *piece, void *out, size_t rows, size_t width, int axis,
                                 CommElement element, cuda::CUstream stream) = 0;
  /// Waits for `stream`, failing instead of waiting for good when another rank is gone.
  virtual Status synchronize(cuda::CUstream stream) = 0;
  /// This rank failed between two collectives and will not come to the next one: ends the group,
  /// so that the other ranks' collectives fail with `why` instead of waiting for it.
  virtual void abort(const Status &why) = 0;
};

/// Enqueues on `stream` the copy of rank `r`'s gathered piece [rows, width] (device memory at
/// `piece`) to its place in `out`, as allGatherDevice lays out the pieces of `world` ranks along
/// `axis` (0 or 1). Nothing to do when the piece is already there. The device collectives of both
/// transports place pieces with it.
Status placeGatheredPiece(const cuda::CudaDriver &driver, const void *piece, void *out, int r,
                          int world, size_t rows, size_t width, int axis, CommElement element,
                          cuda::CUstream stream);

/// Device buffers through host memory, for device collectives over transports that move only host
/// memory (the loopback group's sums, TCP): f32 on the host whatever the element, so a bf16
/// buffer is widened on the way down and rounded once on the way up (round to nearest even).
/// Each call waits for `stream`: the host values are there, or the device copy done, on return.
class HostStaging {
public:
  /// `count` elements at device `buffer`, once the work enqueued before on `stream` has written
  /// them, into host[0, count) (resized to fit).
  Status download(const cuda::CudaDriver &driver, const void *buffer, size_t count,
                  CommElement element, cuda::CUstream stream, std::vector<float> &host);
  /// host[0, count) into `count` elements at device `buffer`.
  Status upload(const cuda::CudaDriver &driver, const std::vector<float> &host, size_t count,
                void *buffer, CommElement element, cuda::CUstream stream);

private:
  std::vector<uint16_t> bf16_; // a bf16 buffer's bits on the way
};

} // namespace glm::runtime
