// Reading collective steps.
#include "runtime/plan/Collectives.h"

#include <algorithm>

namespace glm::runtime {

namespace {

int64_t elements(const plan::TensorRef &t) {
  int64_t n = 1;
  for (int64_t d : *t.shape()) {
    n *= d;
  }
  return n;
}

std::string shapeText(const plan::TensorRef &t) {
  std::string text = "[";
  for (uint32_t d = 0; d < t.shape()->size(); ++d) {
    text += strCat(d > 0 ? ", " : "", t.shape()->Get(d));
  }
  return text + "]";
}

} // namespace

Expected<CollectiveShape> collectiveShape(const plan::Step &step, int64_t world) {
  if (step.collective() == nullptr) {
    return invalidArgument("step ", step.name() ? step.name()->str() : "?", " (",
                           step.op() ? step.op()->str() : "?",
                           ") is not a collective (all_reduce or all_gather)");
  }
  const plan::CollectiveKind kind = step.collective()->kind();
  if (kind != plan::CollectiveKind::AllReduce && kind != plan::CollectiveKind::AllGather) {
    return unimplemented("a ", plan::EnumNameCollectiveKind(kind),
                         " step (the engines run AllReduce and AllGather)");
  }
  const char *op = plan::EnumNameCollectiveKind(kind);
  if (step.operands() == nullptr || step.operands()->size() != 1 || step.results() == nullptr ||
      step.results()->size() != 1) {
    return invalidArgument(op, " needs one operand and one result");
  }
  const plan::TensorRef &in = *step.operands()->Get(0);
  const plan::TensorRef &out = *step.results()->Get(0);
  if (in.shape() == nullptr || in.shape()->size() == 0 || out.shape() == nullptr ||
      out.shape()->size() == 0) {
    return invalidArgument(op, " of a tensor without a shape");
  }
  if (in.element() != out.element()) {
    return invalidArgument(op, " from ", plan::EnumNameElementType(in.element()), " to ",
                           plan::EnumNameElementType(out.element()),
                           " (a collective keeps the element type)");
  }
  CollectiveShape shape;
  shape.kind = kind;
  shape.element = in.element();
  shape.rows = in.shape()->Get(0);
  shape.width = elements(in) / std::max<int64_t>(shape.rows, 1);
  if (kind == plan::CollectiveKind::AllReduce) {
    if (elements(out) != elements(in)) {
      return invalidArgument("AllReduce of ", shapeText(in), " into ", shapeText(out));
    }
    return shape;
  }
  // Concatenation along columns unless the step says otherwise.
  shape.axis = static_cast<int>(step.collective()->axis());
  if (shape.axis != 0 && shape.axis != 1) {
    return invalidArgument("AllGather along axis ", shape.axis, " (0 and 1 are supported)");
  }
  if (elements(out) != world * elements(in) ||
      (shape.axis == 1 && out.shape()->Get(0) != shape.rows)) {
    return invalidArgument("AllGather of ", shapeText(in), " along axis ", shape.axis, " over ",
                           world, " ranks into ", shapeText(out));
  }
  return shape;
}

} // namespace glm::runtime
