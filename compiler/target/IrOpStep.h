// A plan.step of the IR as an op's adapter reads it (kernels/common/OpStep.h): the compiler's side
// of the contract the CPU engine also implements, over the plan file.
#pragma once

#include "ir/plan/PlanOps.h"
#include "kernels/common/OpStep.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace glm::compiler {

/// The module-wide facts every step's view reads (looked up once per module).
struct PlanFacts {
  explicit PlanFacts(mlir::ModuleOp module);

  mlir::SymbolTable symbols;
  kernels::TargetInfo target;
  DType activation = DType::BF16;
  int64_t pageTokens = 0, pageBytes = 0;
};

class IrOpStep final : public kernels::OpStep {
public:
  IrOpStep(planir::StepOp step, const PlanFacts &facts);

  std::string name() const override { return step_.getName().str(); }
  int64_t batch() const override { return program_.getBatch(); }
  int64_t rowsPerSequence() const override;
  bool decodeProgram() const override { return program_.getKind() == "decode"; }
  DType activation() const override { return facts_.activation; }
  size_t operandCount() const override { return step_.getInputs().size(); }
  size_t resultCount() const override { return step_.getOutputs().size(); }
  size_t weightCount() const override { return step_.getWeights().size(); }
  size_t stateCount() const override { return step_.getStates().size(); }
  kernels::TensorInfo operand(size_t i) const override;
  kernels::TensorInfo result(size_t i) const override;
  kernels::WeightInfo weight(size_t i) const override;
  kernels::StateInfo state(size_t i) const override;
  std::optional<int64_t> intParam(std::string_view key) const override;
  std::optional<double> floatParam(std::string_view key) const override;
  int64_t pageTokens() const override { return facts_.pageTokens; }
  int64_t pageBytes() const override { return facts_.pageBytes; }
  kernels::TargetInfo target() const override { return facts_.target; }

  /// Whether every weight and state the step names exists, and every EXL3 weight's slice is an
  /// EXL3 layout (an error names the first that is not).
  mlir::LogicalResult verifySymbols() const;

private:
  // Op handles' accessors are not const; the view never changes the op.
  mutable planir::StepOp step_;
  mutable planir::ProgramOp program_;
  const PlanFacts &facts_;
};

/// The element type of an MLIR type, as kernels name it (F32 for anything unknown).
DType dtypeOf(mlir::Type type);

} // namespace glm::compiler
