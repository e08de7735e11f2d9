// HostStep: what an op's CPU adapter (kernels/<op>/<op>_op.cpp) runs a step on: host memory for
// the step's operands, results, weights and states, the rows this run uses and the sequences they
// belong to. The CPU engine implements it; the shapes come from the step's OpStep.
//
// The CPU engine runs only the rows a call uses, packed: rows [first, first + count) of the run
// belong to sequence `slot`, which held `length` tokens before the step (the static shape's
// padding rows are not run at all, unlike on the GPU).
#pragma once

#include "kernels/common/OpStep.h"
#include "kernels/common/TopK.h"
#include "kernels/common/WeightView.h"

#include <cstdint>
#include <span>

namespace glm::kernels {

struct HostRowGroup {
  int slot = 0;
  int64_t first = 0;
  int64_t count = 0;
  int64_t length = 0; // the sequence's tokens before this step
};

class HostStep {
public:
  virtual ~HostStep() = default;

  /// The rows this run computes (the sum of the groups' counts).
  virtual int64_t rows() const = 0;
  virtual std::span<const HostRowGroup> groups() const = 0;

  virtual void *operand(size_t i) const = 0;
  virtual void *result(size_t i) const = 0;
  /// Weight i as the reference kernels read it (absent when the step has no weight i).
  virtual WeightView weight(size_t i) const = 0;
  /// The first byte of weight i's slice (an EXL3 binding's matrices, OpStep's geometry).
  virtual const uint8_t *weightBytes(size_t i) const = 0;
  /// The first byte of state i's slice: its slots, or (paged) the page pool.
  virtual uint8_t *stateBytes(size_t i) const = 0;
  /// The pool pages a sequence holds, in order.
  virtual std::span<const int32_t> pages(int slot) const = 0;

  /// This tensor-parallel rank (0 at TP 1).
  virtual int rank() const = 0;
  /// How the reference top-k kernels break ties (the engine's option).
  virtual TopkTieRule tieRule() const = 0;

  const float *f32In(size_t i) const { return static_cast<const float *>(operand(i)); }
  const int32_t *i32In(size_t i) const { return static_cast<const int32_t *>(operand(i)); }
  float *f32Out(size_t i) const { return static_cast<float *>(result(i)); }
  int32_t *i32Out(size_t i) const { return static_cast<int32_t *>(result(i)); }
};

/// Row `row` of sequence `slot` in paged state `index` of the step, `rowsPerPage` rows of it to a
/// page (StepContext.h's layout).
inline uint8_t *pagedRow(const OpStep &step, const HostStep &host, size_t index, int slot,
                         int64_t row, int64_t rowsPerPage) {
  const StateInfo s = step.state(index);
  const int32_t page = host.pages(slot)[static_cast<size_t>(row / rowsPerPage)];
  return host.stateBytes(index) + page * step.pageBytes() + s.offsetInPage +
         (row % rowsPerPage) * s.unitBytes;
}

/// Sequence `slot`'s slot of per-sequence state `index` of the step.
inline uint8_t *stateSlot(const OpStep &step, const HostStep &host, size_t index, int slot) {
  return host.stateBytes(index) + slot * step.state(index).unitBytes;
}

} // namespace glm::kernels
