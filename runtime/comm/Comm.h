// Collective communication between tensor-parallel ranks, behind one interface: loopback threads,
// TCP and NCCL between processes. DeviceComm.h is the same on device memory.
#pragma once

#include "base/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

/// A communicator whose group can break (a rank gone, ranks out of step) and be ended on purpose:
/// what a lockstep engine needs of its control channel besides the collectives, to report health
/// and to end a group whose ranks have diverged.
class GroupComm : public Comm {
public:
  /// Ranks this rank cannot reach now (rank 0's view: the ones that have not (re)joined); empty
  /// while the group works.
  virtual std::vector<int> missingRanks() const = 0;
  bool complete() const { return missingRanks().empty(); }
  /// The failure that last ended the group, or "" when none did.
  virtual std::string lastError() const = 0;
  /// Ends the group: collectives waiting now and later ones fail, with `why` as lastError().
  virtual void disconnect(const std::string &why) = 0;
};

} // namespace glm::runtime
