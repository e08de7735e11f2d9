// A step of a plan file as an op's adapter reads it (kernels/common/OpStep.h): the CPU engine's
// side of the contract the compiler also implements, over the IR.
#pragma once

#include "kernels/common/OpStep.h"
#include "runtime/schema/plan_generated.h"

namespace glm::runtime {

class PlanStep final : public kernels::OpStep {
public:
  PlanStep(const plan::Plan &plan, const plan::Program &program, const plan::Step &step)
      : plan_(plan), program_(program), step_(step) {}

  const plan::Step &step() const { return step_; }

  std::string name() const override { return step_.name() ? step_.name()->str() : "?"; }
  int64_t batch() const override { return program_.batch(); }
  int64_t rowsPerSequence() const override;
  bool decodeProgram() const override { return program_.kind() == plan::ProgramKind::Decode; }
  DType activation() const override {
    return plan_.precision() == plan::Precision::F32 ? DType::F32 : DType::BF16;
  }
  size_t operandCount() const override { return step_.operands() ? step_.operands()->size() : 0; }
  size_t resultCount() const override { return step_.results() ? step_.results()->size() : 0; }
  size_t weightCount() const override { return step_.weights() ? step_.weights()->size() : 0; }
  size_t stateCount() const override { return step_.states() ? step_.states()->size() : 0; }
  kernels::TensorInfo operand(size_t i) const override;
  kernels::TensorInfo result(size_t i) const override;
  kernels::WeightInfo weight(size_t i) const override;
  kernels::StateInfo state(size_t i) const override;
  std::optional<int64_t> intParam(std::string_view key) const override;
  std::optional<double> floatParam(std::string_view key) const override;
  int64_t pageTokens() const override;
  int64_t pageBytes() const override;
  kernels::TargetInfo target() const override;

  const plan::TensorRef &operandRef(size_t i) const {
    return *step_.operands()->Get(static_cast<uint32_t>(i));
  }
  const plan::TensorRef &resultRef(size_t i) const {
    return *step_.results()->Get(static_cast<uint32_t>(i));
  }
  const plan::WeightBinding &binding(size_t i) const {
    return *plan_.weights()->Get(step_.weights()->Get(static_cast<uint32_t>(i)));
  }
  const plan::StateLayout &layout(size_t i) const {
    return *plan_.states()->Get(step_.states()->Get(static_cast<uint32_t>(i)));
  }

private:
  const plan::Attribute *param(std::string_view key) const;

  const plan::Plan &plan_;
  const plan::Program &program_;
  const plan::Step &step_;
};

} // namespace glm::runtime
