// A step of a plan file as an op's adapter reads it.
#include "runtime/engine/PlanStep.h"

#include "runtime/weights/KernelViews.h"
#include "runtime/weights/PlanWeights.h"

namespace glm::runtime {
namespace {

kernels::Shape shapeOf(const flatbuffers::Vector<int64_t> *dims) {
  kernels::Shape s;
  if (dims == nullptr) {
    return s;
  }
  for (int64_t d : *dims) {
    if (s.rank < static_cast<int>(s.dims.size())) {
      s.dims[static_cast<size_t>(s.rank++)] = d;
    }
  }
  return s;
}

/// A plan's element type as kernels name it (the validator admits only known types in tensors
/// and dense weights; anything else reads as f32, which no op's adapter accepts in its place).
DType dtypeOf(plan::ElementType element) {
  Expected<DType> d = dtypeOfElement(element);
  return d.ok() ? *d : DType::F32;
}

kernels::TensorInfo tensorOf(const plan::TensorRef &t) {
  return {dtypeOf(t.element()), shapeOf(t.shape())};
}

} // namespace

int64_t PlanStep::rowsPerSequence() const {
  const auto *tensors = operandCount() > 0 ? step_.operands() : step_.results();
  if (tensors == nullptr || tensors->size() == 0 || tensors->Get(0)->shape() == nullptr ||
      tensors->Get(0)->shape()->size() == 0) {
    return program_.rows();
  }
  return kernels::stepRowsPerSequence(program_.batch(), tensors->Get(0)->shape()->Get(0));
}

kernels::TensorInfo PlanStep::operand(size_t i) const { return tensorOf(operandRef(i)); }

kernels::TensorInfo PlanStep::result(size_t i) const { return tensorOf(resultRef(i)); }

kernels::WeightInfo PlanStep::weight(size_t i) const {
  const plan::WeightBinding &w = binding(i);
  kernels::WeightInfo info;
  info.name = w.name() ? w.name()->str() : "?";
  info.element = dtypeOf(w.element());
  info.shape = shapeOf(w.rank_shape());
  static_assert(
      static_cast<int>(plan::DenseEncoding::Q4) == static_cast<int>(kernels::DenseEncoding::Q4) &&
      static_cast<int>(plan::DenseEncoding::Fp8) == static_cast<int>(kernels::DenseEncoding::Fp8));
  info.encoding = static_cast<kernels::DenseEncoding>(w.encoding()); // the validator checked it
  info.exl3 = w.format() == plan::WeightFormat::EXL3;
  if (info.exl3) {
    // A slice that is no EXL3 layout leaves the geometry empty: the adapters' checks refuse it.
    if (Expected<Exl3ArenaLayout> layout = exl3BindingLayout(w); layout.ok()) {
      info.exl3Geometry = exl3Geometry(*layout);
    }
  }
  return info;
}

kernels::StateInfo PlanStep::state(size_t i) const {
  const plan::StateLayout &s = layout(i);
  return {s.name() ? s.name()->str() : "?", dtypeOf(s.element()),
          static_cast<int64_t>(s.unit_bytes()), static_cast<int64_t>(s.offset_in_page())};
}

const plan::Attribute *PlanStep::param(std::string_view key) const {
  if (step_.attributes() == nullptr) {
    return nullptr;
  }
  for (const plan::Attribute *a : *step_.attributes()) {
    if (a->key() != nullptr && a->key()->string_view() == key) {
      return a;
    }
  }
  return nullptr;
}

std::optional<int64_t> PlanStep::intParam(std::string_view key) const {
  const plan::Attribute *a = param(key);
  return a ? std::optional<int64_t>(a->int_value()) : std::nullopt;
}

std::optional<double> PlanStep::floatParam(std::string_view key) const {
  const plan::Attribute *a = param(key);
  return a ? std::optional<double>(a->float_value()) : std::nullopt;
}

int64_t PlanStep::pageTokens() const {
  return plan_.state_pool() ? plan_.state_pool()->page_tokens() : 0;
}

int64_t PlanStep::pageBytes() const {
  return plan_.state_pool() ? static_cast<int64_t>(plan_.state_pool()->page_bytes()) : 0;
}

kernels::TargetInfo PlanStep::target() const {
  const plan::TargetDesc *t = plan_.target();
  return {t->name() ? t->name()->str() : "?", static_cast<int>(t->sm_count()),
          t->shared_memory_per_block()};
}

} // namespace glm::runtime
