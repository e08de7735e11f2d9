// Reading collective steps, and splitting programs at them.
#include "runtime/plan/Collectives.h"

#include "runtime/plan/StepView.h"

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
  const char *op = plan::EnumNameOpKind(step.op());
  if (step.op() != plan::OpKind::AllReduce && step.op() != plan::OpKind::AllGather) {
    return invalidArgument("a collective step of op ", op, " (only AllReduce and AllGather are)");
  }
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
  shape.op = step.op();
  shape.element = in.element();
  shape.rows = tensorDim(in, 0);
  shape.width = elements(in) / std::max<int64_t>(shape.rows, 1);
  if (step.op() == plan::OpKind::AllReduce) {
    if (elements(out) != elements(in)) {
      return invalidArgument("AllReduce of ", shapeText(in), " into ", shapeText(out));
    }
    return shape;
  }
  // As the CPU backend has always read it: concatenation along columns unless the step says.
  shape.axis = static_cast<int>(intAttribute(step, "axis", 1));
  if (shape.axis != 0 && shape.axis != 1) {
    return invalidArgument("AllGather along axis ", shape.axis, " (0 and 1 are supported)");
  }
  if (elements(out) != world * elements(in) ||
      (shape.axis == 1 && tensorDim(out, 0) != shape.rows)) {
    return invalidArgument("AllGather of ", shapeText(in), " along axis ", shape.axis, " over ",
                           world, " ranks into ", shapeText(out));
  }
  return shape;
}

std::vector<StepRun> splitAtCollectives(const plan::Program &program) {
  std::vector<StepRun> runs;
  StepRun run;
  const uint32_t steps = program.steps() != nullptr ? program.steps()->size() : 0;
  for (uint32_t s = 0; s < steps; ++s) {
    if (isCollective(*program.steps()->Get(s))) {
      run.collective = s;
      runs.push_back(run);
      run = StepRun{s + 1, 0, -1};
    } else {
      ++run.count;
    }
  }
  if (run.count > 0 || runs.empty()) {
    runs.push_back(run);
  }
  return runs;
}

} // namespace glm::runtime
