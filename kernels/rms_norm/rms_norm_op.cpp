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

namespace {

/// rmsNormKernel over `rows` rows of `dim`: x at (xSource, x), weight `weight` where the step has
/// it, the output at result `out`.
GpuLaunch launchOf(const OpStep &step, ArgSource xSource, size_t x, size_t weight, size_t out,
                   int64_t rows, int64_t dim, float eps) {
  ArgPack<RmsNormGpuArgs> p;
  p.bind(p.args.x, xSource, x, "x");
  if (step.hasWeight(weight)) {
    p.bind(p.args.weight, ArgSource::Weight, weight, "weight");
  }
  p.bind(p.args.out, ArgSource::Result, out, "out");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.dim, dim, "dim");
  p.set(p.args.eps, eps, "eps");
  return p.launch("kernels/rms_norm/rms_norm.cuh",
                  kernelInstance("rmsNormKernel", {kernelTypeName(step.activation()),
                                                   kernelTypeName(step.denseWeightType(weight))}),
                  rmsNormLaunch(rows));
}

} // namespace

Expected<GpuStep> rmsNormGpu(const OpStep &step) {
  const GroupedNormShape s = groupedNormShapeOf(step);
  return GpuStep{
      {launchOf(step, ArgSource::Operand, 0, 0, 0, step.rows() * s.groupsPerRow, s.group, s.eps)}};
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

GpuLaunch rmsNormLaunchOf(const OpStep &step, size_t x, size_t weight, size_t out, float eps) {
  return launchOf(step, ArgSource::Result, x, weight, out, step.rows(), step.result(x).shape[1],
                  eps);
}

Status rmsNormCpuOf(const OpStep &step, const HostStep &host, size_t x, size_t weight, size_t out,
                    float eps) {
  return rmsNormRef({.x = host.f32Out(x),
                     .weight = host.weight(weight),
                     .out = host.f32Out(out),
                     .rows = host.rows(),
                     .dim = step.result(x).shape[1],
                     .eps = eps});
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
