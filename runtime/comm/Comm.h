// Collective communication between tensor-parallel ranks, behind one interface: loopback threads
// and TCP between processes now, NCCL later.
#pragma once

#include "runtime/common/Status.h"

#include <cstddef>
#include <cstdint>

namespace glm::runtime {

class Comm {
public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  /// Every rank's `buffer` becomes the sum of all ranks' buffers (count floats), added in rank
  /// order so every rank gets the same bits.
  virtual Status allReduce(float *buffer, size_t count) = 0;

  /// Concatenates every rank's piece along `axis` of a row-major tensor of `rows` rows: rank r's
  /// piece [rows, width] lands at columns [r width, (r + 1) width) of out [rows, world width]
  /// (axis 1); for axis 0, rank r's rows follow rank r-1's.
  virtual Status allGather(const float *piece, float *out, size_t rows, size_t width, int axis) = 0;

  /// Every rank's `buffer` (`bytes` long on every rank) becomes rank 0's: the lockstep control
  /// channel, through which rank 0 tells the other ranks which engine call comes next.
  virtual Status broadcast(void *buffer, size_t bytes) = 0;
};

} // namespace glm::runtime
