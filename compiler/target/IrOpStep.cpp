// A plan.step of the IR as an op's adapter reads it.
#include "compiler/target/IrOpStep.h"

#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/KernelViews.h"

namespace glm::compiler {

using namespace mlir;

namespace {

kernels::Shape shapeOf(ArrayRef<int64_t> dims) {
  kernels::Shape s;
  for (int64_t d : dims) {
    if (s.rank < static_cast<int>(s.dims.size())) {
      s.dims[static_cast<size_t>(s.rank++)] = d;
    }
  }
  return s;
}

kernels::TensorInfo tensorOf(Value buffer) {
  auto type = cast<planir::BufferType>(buffer.getType());
  return {dtypeOf(type.getElementType()), shapeOf(type.getShape())};
}

} // namespace

DType dtypeOf(Type t) {
  if (t.isBF16()) {
    return DType::BF16;
  }
  if (t.isF16()) {
    return DType::F16;
  }
  if (isa<Float8E4M3FNType>(t)) {
    return DType::F8_E4M3;
  }
  if (t.isInteger(32)) {
    return DType::I32;
  }
  if (t.isInteger(64)) {
    return DType::I64;
  }
  if (t.isInteger(16)) {
    return DType::I16;
  }
  if (t.isInteger(8)) {
    return DType::U8;
  }
  return DType::F32;
}

PlanFacts::PlanFacts(ModuleOp module) : symbols(module) {
  for (auto t : module.getOps<planir::TargetOp>()) {
    target = {t.getName().str(), static_cast<int>(t.getSmCount()),
              static_cast<uint32_t>(t.getSharedMemoryPerBlock())};
    activation = t.getPrecision() == "f32" ? DType::F32 : DType::BF16;
  }
  for (auto p : module.getOps<planir::StatePoolOp>()) {
    pageTokens = p.getPageTokens();
    pageBytes = p.getPageBytes().value_or(0);
  }
}

IrOpStep::IrOpStep(planir::StepOp step, const PlanFacts &facts)
    : step_(step), program_(step->getParentOfType<planir::ProgramOp>()), facts_(facts) {}

int64_t IrOpStep::rowsPerSequence() const {
  Value first = !step_.getInputs().empty()    ? step_.getInputs()[0]
                : !step_.getOutputs().empty() ? step_.getOutputs()[0]
                                              : Value();
  if (!first) {
    return program_.getRows();
  }
  ArrayRef<int64_t> shape = cast<planir::BufferType>(first.getType()).getShape();
  return shape.empty() ? program_.getRows()
                       : kernels::stepRowsPerSequence(program_.getBatch(), shape[0]);
}

kernels::TensorInfo IrOpStep::operand(size_t i) const { return tensorOf(step_.getInputs()[i]); }

kernels::TensorInfo IrOpStep::result(size_t i) const { return tensorOf(step_.getOutputs()[i]); }

kernels::WeightInfo IrOpStep::weight(size_t i) const {
  auto ref = cast<FlatSymbolRefAttr>(step_.getWeights()[i]);
  auto w = facts_.symbols.lookup<planir::WeightOp>(ref.getValue());
  kernels::WeightInfo info;
  info.name = ref.getValue().str();
  if (!w) {
    return info; // verifySymbols reports it
  }
  info.element = dtypeOf(w.getElement());
  info.shape = shapeOf(w.getRankShape());
  info.encoding = w.getEncoding() == "q4"    ? kernels::DenseEncoding::Q4
                  : w.getEncoding() == "fp8" ? kernels::DenseEncoding::Fp8
                                             : kernels::DenseEncoding::Plain;
  info.exl3 = w.getFormat() == "exl3";
  if (info.exl3) {
    Expected<Exl3ArenaLayout> layout = Exl3ArenaLayout::ofBinding(
        info.name, w.getRankShape(), w.getExperts() > 0, static_cast<uint64_t>(w.getSize()));
    if (layout.ok()) { // else verifySymbols refuses the step
      info.exl3Geometry = exl3Geometry(*layout);
    }
  }
  return info;
}

kernels::StateInfo IrOpStep::state(size_t i) const {
  auto ref = cast<FlatSymbolRefAttr>(step_.getStates()[i]);
  auto s = facts_.symbols.lookup<planir::StateOp>(ref.getValue());
  kernels::StateInfo info;
  info.name = ref.getValue().str();
  if (!s) {
    return info;
  }
  info.element = dtypeOf(s.getElement());
  int64_t bytes = static_cast<int64_t>(dtypeSize(info.element));
  for (int64_t d : s.getUnitShape()) {
    bytes *= d;
  }
  info.unitBytes = bytes;
  info.offsetInPage = s.getOffsetInPage().value_or(0);
  return info;
}

std::optional<int64_t> IrOpStep::intParam(std::string_view key) const {
  Attribute a = step_.getParams().get(StringRef(key.data(), key.size()));
  if (auto i = dyn_cast_or_null<IntegerAttr>(a)) {
    return i.getValue().getSExtValue();
  }
  if (auto b = dyn_cast_or_null<BoolAttr>(a)) {
    return b.getValue() ? 1 : 0;
  }
  if (isa_and_nonnull<UnitAttr>(a)) {
    return 1;
  }
  return std::nullopt;
}

std::optional<double> IrOpStep::floatParam(std::string_view key) const {
  if (auto f =
          dyn_cast_or_null<FloatAttr>(step_.getParams().get(StringRef(key.data(), key.size())))) {
    return f.getValueAsDouble();
  }
  return std::nullopt;
}

LogicalResult IrOpStep::verifySymbols() const {
  for (Attribute a : step_.getWeights()) {
    auto w = facts_.symbols.lookup<planir::WeightOp>(cast<FlatSymbolRefAttr>(a).getValue());
    if (!w) {
      return step_.emitOpError() << "names weight " << a << ", which the module does not declare";
    }
    if (w.getFormat() == "exl3") {
      // Kernels address an EXL3 binding by its layout: a size that is none is refused here.
      Expected<Exl3ArenaLayout> layout =
          Exl3ArenaLayout::ofBinding(w.getSymName().str(), w.getRankShape(), w.getExperts() > 0,
                                     static_cast<uint64_t>(w.getSize()));
      if (!layout.ok()) {
        return step_.emitOpError() << layout.status().message();
      }
    }
  }
  for (Attribute a : step_.getStates()) {
    if (!facts_.symbols.lookup<planir::StateOp>(cast<FlatSymbolRefAttr>(a).getValue())) {
      return step_.emitOpError() << "names state " << a << ", which the module does not declare";
    }
  }
  return success();
}

} // namespace glm::compiler
