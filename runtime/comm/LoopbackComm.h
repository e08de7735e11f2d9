// All ranks as threads of one process: what the tests and single-GPU runs of TP plans use.
#pragma once

#include "runtime/comm/Comm.h"

#include <barrier>
#include <memory>
#include <vector>

namespace glm::runtime {

/// The shared meeting point of one group of loopback ranks. Each rank's thread calls its own
/// LoopbackComm; a collective returns once every rank has joined it.
class LoopbackGroup {
public:
  explicit LoopbackGroup(int world);
  /// The communicator of rank `rank`; the group must outlive it.
  std::unique_ptr<Comm> comm(int rank);

private:
  friend class LoopbackComm;
  int world_;
  std::barrier<> barrier_;
  std::vector<const void *> inputs_;
  std::vector<float> scratch_;
};

} // namespace glm::runtime
