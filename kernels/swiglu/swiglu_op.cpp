// swiglu's plan adapter: operands gate and up [rows, width], result 0; parameter limit (the
// clamp, +inf for none).
#include "kernels/swiglu/swiglu_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/swiglu/swiglu_gpu.h"

#include <cmath>

namespace glm::kernels {

Expected<GpuStep> swigluGpu(const OpStep &step) {
  const int64_t width = step.operandDim(0, 1);
  ArgPack<SwigluGpuArgs> p;
  p.bind(p.args.gate, ArgSource::Operand, 0, "gate");
  p.bind(p.args.up, ArgSource::Operand, 1, "up");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.rows, step.rows(), "rows");
  p.set(p.args.width, width, "width");
  p.set(p.args.inputStride, width, "inputStride");
  p.set(p.args.limit, step.floatParam("limit", INFINITY), "limit");
  return GpuStep{{p.launch("kernels/swiglu/swiglu.cuh",
                           kernelInstance("swigluKernel", {kernelTypeName(step.activation())}),
                           swigluLaunch(step.rows(), width))}};
}

Status swigluCpu(const OpStep &step, const HostStep &host) {
  return swigluActivationRef({.gate = host.f32In(0),
                              .up = host.f32In(1),
                              .out = host.f32Out(0),
                              .count = host.rows() * step.operandDim(0, 1),
                              .limit = step.floatParam("limit", INFINITY)});
}

Status swigluCheck(const OpStep &step) {
  Contract c(step);
  c.counts(2, 1, 0, 0, 0);
  const Shape gate = c.operand(0, c.activation(), 2);
  c.operandAs(1, c.activation(), gate);
  c.resultAs(0, c.activation(), gate);
  c.floatParam("limit", INFINITY, 0, INFINITY);
  return c.status();
}

} // namespace glm::kernels
