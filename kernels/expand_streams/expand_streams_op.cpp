// expand_streams' plan adapter: operand 0 [rows, hidden] into result 0 [rows, streams, hidden].
#include "kernels/expand_streams/expand_streams_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/expand_streams/expand_streams.h"
#include "kernels/expand_streams/expand_streams_gpu.h"

namespace glm::kernels {

Expected<GpuStep> expandStreamsGpu(const OpStep &step) {
  const int64_t streams = step.resultDim(0, 1), hidden = step.resultDim(0, 2);
  ArgPack<ExpandStreamsGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.tokens, step.rows(), "tokens");
  p.set(p.args.streams, streams, "streams");
  p.set(p.args.hidden, hidden, "hidden");
  return GpuStep{
      {p.launch("kernels/expand_streams/expand_streams.cuh",
                kernelInstance("expandStreamsKernel", {kernelTypeName(step.activation())}),
                expandStreamsLaunch(step.rows(), hidden))}};
}

Status expandStreamsCpu(const OpStep &step, const HostStep &host) {
  return expandStreamsRef({.x = host.f32In(0),
                           .out = host.f32Out(0),
                           .tokens = host.rows(),
                           .streams = step.resultDim(0, 1),
                           .hidden = step.resultDim(0, 2)});
}

Status expandStreamsCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 1, 0, 0, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  const Shape out = c.result(0, c.activation(), 3);
  c.check(out[0] == x[0] && out[2] == x[1], "result 0 is ", Contract::shapeText(out),
          " for an input of ", Contract::shapeText(x));
  return c.status();
}

} // namespace glm::kernels
