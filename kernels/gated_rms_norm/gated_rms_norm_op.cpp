// gated_norm's plan adapter: operands x and gate [rows, width], normalised in groups of `group`
// (default the whole row) with weight 0, into result 0; parameter eps.
#include "kernels/gated_rms_norm/gated_rms_norm_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "kernels/rms_norm/rms_norm_op.h"

namespace glm::kernels {

namespace {

/// gatedRmsNormKernel over `rows` rows of `dim`: x at (xSource, x), the gate operand `gate`,
/// weight `weight` where the step has it, the output at result `out`.
GpuLaunch launchOf(const OpStep &step, ArgSource xSource, size_t x, size_t gate, size_t weight,
                   size_t out, int64_t rows, int64_t dim, float eps) {
  ArgPack<GatedRmsNormGpuArgs> p;
  p.bind(p.args.x, xSource, x, "x");
  p.bind(p.args.gate, ArgSource::Operand, gate, "gate");
  if (step.hasWeight(weight)) {
    p.bind(p.args.weight, ArgSource::Weight, weight, "weight");
  }
  p.bind(p.args.out, ArgSource::Result, out, "out");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.dim, dim, "dim");
  p.set(p.args.eps, eps, "eps");
  return p.launch(
      "kernels/gated_rms_norm/gated_rms_norm.cuh",
      kernelInstance("gatedRmsNormKernel", {kernelTypeName(step.activation()),
                                            kernelTypeName(step.denseWeightType(weight))}),
      gatedRmsNormLaunch(rows));
}

} // namespace

Expected<GpuStep> gatedNormGpu(const OpStep &step) {
  const GroupedNormShape s = groupedNormShapeOf(step);
  return GpuStep{{launchOf(step, ArgSource::Operand, 0, 1, 0, 0, step.rows() * s.groupsPerRow,
                           s.group, s.eps)}};
}

Status gatedNormCpu(const OpStep &step, const HostStep &host) {
  const GroupedNormShape s = groupedNormShapeOf(step);
  return gatedRmsNormRef({.x = host.f32In(0),
                          .gate = host.f32In(1),
                          .weight = host.weight(0),
                          .out = host.f32Out(0),
                          .rows = host.rows() * s.groupsPerRow,
                          .dim = s.group,
                          .eps = s.eps});
}

GpuLaunch gatedNormLaunchOf(const OpStep &step, size_t x, size_t gate, size_t weight, size_t out,
                            int64_t group, float eps) {
  const int64_t width = step.result(x).shape[1];
  return launchOf(step, ArgSource::Result, x, gate, weight, out, step.rows() * (width / group),
                  group, eps);
}

Status gatedNormCpuOf(const OpStep &step, const HostStep &host, size_t x, size_t gate,
                      size_t weight, size_t out, int64_t group, float eps) {
  const int64_t width = step.result(x).shape[1];
  return gatedRmsNormRef({.x = host.f32Out(x),
                          .gate = host.f32In(gate),
                          .weight = host.weight(weight),
                          .out = host.f32Out(out),
                          .rows = host.rows() * (width / group),
                          .dim = group,
                          .eps = eps});
}

Status gatedNormCheck(const OpStep &step) {
  Contract c(step);
  c.counts(2, 1, 0, 1, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  c.operandAs(1, c.activation(), x);
  c.resultAs(0, c.activation(), x);
  const int64_t group = c.intParam("group", x[1], 1, x[1]);
  c.check(c.ok() && x[1] % group == 0, "group ", group, " does not divide rows of ", x[1]);
  c.weightDense(0);
  c.weightHolds(0, group);
  c.floatParam("eps", 1e-5, 0, 1);
  return c.status();
}

} // namespace glm::kernels
