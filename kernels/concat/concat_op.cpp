// concat's plan adapter: operands [rows, width_i] joined along dimension 1 into result 0.
#include "kernels/concat/concat_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/concat/concat.h"
#include "kernels/concat/concat_gpu.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

Expected<GpuStep> concatGpu(const OpStep &step) {
  const size_t count = step.operandCount();
  if (count > static_cast<size_t>(kConcatMaxInputs)) {
    return step.error(StatusCode::Unimplemented, "concat of ", count, " inputs (the kernel takes ",
                      kConcatMaxInputs, ")");
  }
  ArgPack<ConcatGpuArgs> p;
  int64_t widest = 0;
  for (size_t i = 0; i < count; ++i) {
    const std::string field = "inputs[" + std::to_string(i) + "]";
    p.bind(p.args.inputs[i], ArgSource::Operand, i, field.c_str());
    p.set(p.args.widths[i], step.operandDim(i, 1), ("widths[" + std::to_string(i) + "]").c_str());
    widest = std::max(widest, step.operandDim(i, 1));
  }
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.rows, step.rows(), "rows");
  p.set(p.args.count, count, "count");
  return GpuStep{{p.launch("kernels/concat/concat.cuh",
                           kernelInstance("concatKernel", {kernelTypeName(step.activation())}),
                           concatLaunch(step.rows(), widest, static_cast<int>(count)))}};
}

Status concatCpu(const OpStep &step, const HostStep &host) {
  std::vector<const float *> inputs;
  std::vector<int64_t> widths;
  for (size_t i = 0; i < step.operandCount(); ++i) {
    inputs.push_back(host.f32In(i));
    widths.push_back(step.operandDim(i, 1));
  }
  return concatRef(
      {.inputs = inputs, .widths = widths, .out = host.f32Out(0), .rows = host.rows()});
}

Status concatCheck(const OpStep &step) {
  Contract c(step);
  c.check(step.operandCount() >= 1, "joins no operands");
  c.counts(step.operandCount(), 1, 0, 0, 0);
  int64_t width = 0;
  for (size_t i = 0; c.ok() && i < step.operandCount(); ++i) {
    const Shape x = c.operand(i, c.activation(), 2);
    c.check(x[0] == step.rows(), "operand ", i, " has ", x[0], " rows, the step ", step.rows());
    width += x[1];
  }
  c.resultIs(0, c.activation(), {step.rows(), width});
  return c.status();
}

} // namespace glm::kernels
