// Read access to one step of a plan with the questions kernel selection and argument building ask:
// static row count, operands and results, weights, states and parameters by key.
#pragma once

#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <string>

namespace glm::runtime {

/// A step's attribute by key, or null.
inline const plan::Attribute *stepAttribute(const plan::Step &step, const char *key) {
  if (step.attributes() == nullptr) {
    return nullptr;
  }
  for (const plan::Attribute *a : *step.attributes()) {
    if (a->key() != nullptr && a->key()->str() == key) {
      return a;
    }
  }
  return nullptr;
}
inline int64_t intAttribute(const plan::Step &step, const char *key, int64_t fallback = 0) {
  const plan::Attribute *a = stepAttribute(step, key);
  return a ? a->int_value() : fallback;
}
inline float floatAttribute(const plan::Step &step, const char *key, float fallback = 0) {
  const plan::Attribute *a = stepAttribute(step, key);
  return a ? static_cast<float>(a->float_value()) : fallback;
}
/// Dimension d of a tensor's shape.
inline int64_t tensorDim(const plan::TensorRef &t, int d) {
  return t.shape()->Get(static_cast<uint32_t>(d));
}

class StepView {
public:
  StepView(const plan::Plan &plan, const plan::Program &program, const plan::Step &step)
      : plan_(plan), program_(program), step_(step) {}

  const plan::Plan &plan() const { return plan_; }
  const plan::Program &program() const { return program_; }
  const plan::Step &step() const { return step_; }
  std::string name() const { return step_.name() ? step_.name()->str() : "?"; }

  /// Rows the program runs: batch x rows (its static shape).
  int64_t rows() const {
    return static_cast<int64_t>(program_.batch()) * static_cast<int64_t>(program_.rows());
  }
  int64_t batch() const { return program_.batch(); }
  int64_t rowsPerSequence() const { return program_.rows(); }

  plan::ElementType activationType() const {
    return plan_.precision() == plan::Precision::F32 ? plan::ElementType::F32
                                                     : plan::ElementType::BF16;
  }

  size_t operandCount() const { return step_.operands() ? step_.operands()->size() : 0; }
  size_t resultCount() const { return step_.results() ? step_.results()->size() : 0; }
  const plan::TensorRef &operand(size_t i) const {
    return *step_.operands()->Get(static_cast<uint32_t>(i));
  }
  const plan::TensorRef &result(size_t i) const {
    return *step_.results()->Get(static_cast<uint32_t>(i));
  }
  static int64_t dim(const plan::TensorRef &t, int d) { return tensorDim(t, d); }

  size_t weightCount() const { return step_.weights() ? step_.weights()->size() : 0; }
  bool hasWeight(size_t i) const { return i < weightCount(); }
  const plan::WeightBinding &weight(size_t i) const {
    return *plan_.weights()->Get(step_.weights()->Get(static_cast<uint32_t>(i)));
  }
  size_t stateCount() const { return step_.states() ? step_.states()->size() : 0; }
  uint32_t stateIndex(size_t i) const { return step_.states()->Get(static_cast<uint32_t>(i)); }
  const plan::StateLayout &state(size_t i) const { return *plan_.states()->Get(stateIndex(i)); }

  const plan::Attribute *attribute(const char *key) const { return stepAttribute(step_, key); }
  int64_t intAttr(const char *key, int64_t fallback = 0) const {
    return intAttribute(step_, key, fallback);
  }
  float floatAttr(const char *key, float fallback = 0) const {
    return floatAttribute(step_, key, fallback);
  }

private:
  const plan::Plan &plan_;
  const plan::Program &program_;
  const plan::Step &step_;
};

/// A kernel instance without the glm::kernels:: qualifications, for tables.
inline std::string shortKernelName(std::string name) {
  const std::string prefix = "glm::kernels::";
  for (size_t at = name.find(prefix); at != std::string::npos; at = name.find(prefix)) {
    name.erase(at, prefix.size());
  }
  return name;
}

} // namespace glm::runtime
