// add's plan adapter: operands a and b, result out, all [rows, width] (or [rows]).
#include "kernels/add/add_op.h"

#include "kernels/add/add.h"
#include "kernels/add/add_gpu.h"
#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"

namespace glm::kernels {
namespace {

/// Elements one row of the operands holds.
int64_t widthOf(const OpStep &step) { return step.operand(0).shape.rowWidth(); }

} // namespace

Expected<GpuStep> addGpu(const OpStep &step) {
  const int64_t count = step.rows() * widthOf(step);
  ArgPack<AddGpuArgs> p;
  p.bind(p.args.a, ArgSource::Operand, 0, "a");
  p.bind(p.args.b, ArgSource::Operand, 1, "b");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.count, count, "count");
  return GpuStep{{p.launch("kernels/add/add.cuh",
                           kernelInstance("addKernel", {kernelTypeName(step.activation())}),
                           addLaunch(count))}};
}

Status addCpu(const OpStep &step, const HostStep &host) {
  return addRef({.a = host.f32In(0),
                 .b = host.f32In(1),
                 .out = host.f32Out(0),
                 .count = host.rows() * widthOf(step)});
}

Status addCheck(const OpStep &step) {
  Contract c(step);
  c.counts(2, 1, 0, 0, 0);
  const Shape a = c.operand(0, c.activation(), c.ok() ? step.operand(0).shape.rank : 0);
  c.operandAs(1, c.activation(), a);
  c.resultAs(0, c.activation(), a);
  return c.status();
}

} // namespace glm::kernels
