// stream_mean's plan adapter: operand 0 [rows, streams, hidden] averaged into result 0
// [rows, hidden].
#include "kernels/stream_mean/stream_mean_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/stream_mean/stream_mean.h"
#include "kernels/stream_mean/stream_mean_gpu.h"

namespace glm::kernels {

Expected<GpuStep> streamMeanGpu(const OpStep &step) {
  const int64_t hcMult = step.operandDim(0, 1), hidden = step.operandDim(0, 2);
  ArgPack<StreamMeanGpuArgs> p;
  p.bind(p.args.streams, ArgSource::Operand, 0, "streams");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.tokens, step.rows(), "tokens");
  p.set(p.args.hcMult, hcMult, "hcMult");
  p.set(p.args.hidden, hidden, "hidden");
  return GpuStep{{p.launch("kernels/stream_mean/stream_mean.cuh",
                           kernelInstance("streamMeanKernel", {kernelTypeName(step.activation())}),
                           streamMeanLaunch(step.rows(), hidden))}};
}

Status streamMeanCpu(const OpStep &step, const HostStep &host) {
  return streamMeanRef({.streams = host.f32In(0),
                        .out = host.f32Out(0),
                        .tokens = host.rows(),
                        .hcMult = step.operandDim(0, 1),
                        .hidden = step.operandDim(0, 2)});
}

Status streamMeanCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 1, 0, 0, 0);
  const Shape x = c.operand(0, c.activation(), 3);
  c.resultIs(0, c.activation(), {x[0], x[2]});
  return c.status();
}

} // namespace glm::kernels
