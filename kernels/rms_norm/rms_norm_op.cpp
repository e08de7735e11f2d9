// rms_norm's plan adapter: operand 0 x [rows, width] normalised in groups of `group` (default the
// whole row) with optional weight 0, into result 0; parameter eps.
#include "kernels/rms_norm/rms_norm_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rms_norm/rms_norm_gpu.h"

namespace glm::kernels {

GroupedNormShape groupedNormShapeOf(const OpStep &step) {
  const int64_t width = step.operandDim(0, 1);
  const int64_t group = step.intParam("group", width);
  return {width / group, group, step.floatParam("eps", 1e-5f)};
}

Expected<GpuStep> rmsNormGpu(const OpStep &step) {
  const GroupedNormShape s = groupedNormShapeOf(step);
  const int64_t rows = step.rows() * s.groupsPerRow;
  ArgPack<RmsNormGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  if (step.hasWeight(0)) {
    p.bind(p.args.weight, ArgSource::Weight, 0, "weight");
  }
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.dim, s.group, "dim");
  p.set(p.args.eps, s.eps, "eps");
  return GpuStep{
      {p.launch("kernels/rms_norm/rms_norm.cuh",
                kernelInstance("rmsNormKernel", {kernelTypeName(step.activation()),
                                                 kernelTypeName(step.denseWeightType(0))}),
                rmsNormLaunch(rows))}};
}

Status rmsNormCpu(const OpStep &step, const HostStep &host) {
  const GroupedNormShape s = groupedNormShapeOf(step);
  return rmsNormRef({.x = host.f32In(0),
                     .weight = host.weight(0),
                     .out = host.f32Out(0),
                     .rows = host.rows() * s.groupsPerRow,
                     .dim = s.group,
                     .eps = s.eps});
}

Status rmsNormCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 1, 0, 1, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  c.resultAs(0, c.activation(), x);
  const int64_t group = c.intParam("group", x[1], 1, x[1]);
  c.check(c.ok() && x[1] % group == 0, "group ", group, " does not divide rows of ", x[1]);
  c.weightDense(0);
  c.weightHolds(0, group);
  c.floatParam("eps", 1e-5, 0, 1);
  return c.status();
}

} // namespace glm::kernels
