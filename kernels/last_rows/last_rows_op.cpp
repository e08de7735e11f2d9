// last_rows' plan adapter: operand 0 x [batch · rows, width], operand 1 the step's positions,
// result 0 [batch, width], result 1 the picked rows' positions i32 [batch] (the head's).
#include "kernels/last_rows/last_rows_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/last_rows/last_rows.h"
#include "kernels/last_rows/last_rows_gpu.h"

#include <vector>

namespace glm::kernels {

Expected<GpuStep> lastRowsGpu(const OpStep &step) {
  const int64_t width = step.operandDim(0, 1);
  ArgPack<LastRowsGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  p.bind(p.args.positions, ArgSource::Operand, 1, "positions");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.bind(p.args.picked, ArgSource::Result, 1, "picked");
  p.set(p.args.batch, step.batch(), "batch");
  p.set(p.args.rowsPerSequence, step.rowsPerSequence(), "rowsPerSequence");
  p.set(p.args.width, width, "width");
  return GpuStep{{p.launch("kernels/last_rows/last_rows.cuh",
                           kernelInstance("lastRowsKernel", {kernelTypeName(step.activation())}),
                           lastRowsLaunch(step.batch(), width))}};
}

Status lastRowsCpu(const OpStep &step, const HostStep &host) {
  // The CPU runs each sequence's rows packed, group by group: its last is the group's last.
  std::vector<int64_t> rows;
  for (const HostRowGroup &g : host.groups()) {
    rows.push_back(g.first + g.count - 1);
  }
  return lastRowsRef({.x = host.f32In(0),
                      .rows = rows.data(),
                      .out = host.f32Out(0),
                      .count = static_cast<int64_t>(rows.size()),
                      .width = step.operandDim(0, 1),
                      .positions = host.i32In(1),
                      .picked = host.i32Out(1)});
}

Status lastRowsCheck(const OpStep &step) {
  Contract c(step);
  c.counts(2, 2, 0, 0, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  c.operandIs(1, DType::I32, {x[0]});
  c.resultIs(0, c.activation(), {step.batch(), x[1]});
  c.resultIs(1, DType::I32, {step.batch()});
  return c.status();
}

} // namespace glm::kernels
