// The pieces of argument structs that many ops' adapters share: type names of kernel instances,
// the step context, and per-sequence and paged state layouts, packed from a step's OpStep.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/OpStep.h"
#include "kernels/common/StepContext.h"

#include <initializer_list>
#include <string>

namespace glm::kernels {

/// A template argument for element type `t`: "float", "glm::kernels::Bf16",
/// "glm::kernels::Fp8E4m3" (any other type reads as float).
inline std::string kernelTypeName(DType t) {
  switch (t) {
  case DType::BF16:
    return "glm::kernels::Bf16";
  case DType::F8_E4M3:
    return "glm::kernels::Fp8E4m3";
  default:
    return "float";
  }
}

/// The instance `kernel<args...>` of namespace glm::kernels.
inline std::string kernelInstance(const char *kernel, std::initializer_list<std::string> args) {
  std::string name = std::string("glm::kernels::") + kernel + "<";
  bool first = true;
  for (const std::string &a : args) {
    name += (first ? "" : ", ") + a;
    first = false;
  }
  return name + ">";
}

/// Binds `ctx` to the step's context operands: positions at operand `first`, sequence slots after
/// it, and the page table after those when `paged`.
template <typename Args>
void packStepContext(ArgPack<Args> &p, StepContext &ctx, const OpStep &step, size_t first,
                     bool paged) {
  p.bind(ctx.positions, ArgSource::Operand, first, "ctx.positions");
  p.bind(ctx.slots, ArgSource::Operand, first + 1, "ctx.slots");
  p.set(ctx.rowsPerSequence, step.rowsPerSequence(), "ctx.rowsPerSequence");
  if (paged) {
    p.bind(ctx.pageTable, ArgSource::Operand, first + 2, "ctx.pageTable");
    p.set(ctx.maxPages, step.operandDim(first + 2, 1), "ctx.maxPages");
  }
}

/// State `index` of the step as a per-sequence slot layout.
template <typename Args>
void packSlotState(ArgPack<Args> &p, SlotState &state, const OpStep &step, size_t index,
                   const std::string &name) {
  p.bind(state.base, ArgSource::State, index, (name + ".base").c_str());
  p.set(state.unitBytes, step.state(index).unitBytes, (name + ".unitBytes").c_str());
}

/// State `index` of the step as a paged layout of `unitsPerPage` rows a page.
template <typename Args>
void packPagedState(ArgPack<Args> &p, PagedState &state, const OpStep &step, size_t index,
                    int64_t unitsPerPage, const std::string &name) {
  const StateInfo s = step.state(index);
  p.bind(state.poolBase, ArgSource::State, index, (name + ".poolBase").c_str());
  p.set(state.pageBytes, step.pageBytes(), (name + ".pageBytes").c_str());
  p.set(state.offsetInPage, s.offsetInPage, (name + ".offsetInPage").c_str());
  p.set(state.unitBytes, s.unitBytes, (name + ".unitBytes").c_str());
  p.set(state.unitsPerPage, unitsPerPage, (name + ".unitsPerPage").c_str());
}

} // namespace glm::kernels
