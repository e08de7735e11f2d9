// mhc_post's plan adapter: operands y [rows, hidden], post [rows, streams] f32, comb
// [rows, streams, streams] f32 and the residual streams [rows, streams, hidden], result 0 the new
// streams.
#include "kernels/mhc_post/mhc_post_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/mhc_post/mhc_post.h"
#include "kernels/mhc_post/mhc_post_gpu.h"

namespace glm::kernels {

GpuLaunch mhcPostLaunchOf(const OpStep &step, size_t out) {
  const int64_t streams = step.operandDim(3, 1), hidden = step.operandDim(3, 2);
  ArgPack<MhcPostGpuArgs> p;
  p.bind(p.args.y, ArgSource::Operand, 0, "y");
  p.bind(p.args.residual, ArgSource::Operand, 3, "residual");
  p.bind(p.args.post, ArgSource::Operand, 1, "post");
  p.bind(p.args.comb, ArgSource::Operand, 2, "comb");
  p.bind(p.args.out, ArgSource::Result, out, "out");
  p.set(p.args.tokens, step.rows(), "tokens");
  p.set(p.args.hidden, hidden, "hidden");
  return p.launch(
      "kernels/mhc_post/mhc_post.cuh",
      kernelInstance("mhcPostKernel", {kernelTypeName(step.activation()), std::to_string(streams)}),
      mhcPostLaunch(step.rows(), hidden));
}

Status mhcPostCpuOf(const OpStep &step, const HostStep &host, size_t out) {
  return mhcPostRef({.y = host.f32In(0),
                     .residual = host.f32In(3),
                     .post = host.f32In(1),
                     .comb = host.f32In(2),
                     .out = host.f32Out(out),
                     .tokens = host.rows(),
                     .hcMult = step.operandDim(3, 1),
                     .hidden = step.operandDim(3, 2)});
}

Expected<GpuStep> mhcPostGpu(const OpStep &step) { return GpuStep{{mhcPostLaunchOf(step, 0)}}; }

Status mhcPostCpu(const OpStep &step, const HostStep &host) { return mhcPostCpuOf(step, host, 0); }

Shape mhcPostContract(Contract &c, size_t out) {
  const Shape streams = c.operand(3, c.activation(), 3);
  const int64_t rows = streams[0], s = streams[1], hidden = streams[2];
  c.operandIs(0, c.activation(), {rows, hidden});
  c.operandIs(1, DType::F32, {rows, s});
  c.operandIs(2, DType::F32, {rows, s, s});
  c.resultAs(out, c.activation(), streams);
  return streams;
}

Status mhcPostCheck(const OpStep &step) {
  Contract c(step);
  c.counts(4, 1, 0, 0, 0);
  mhcPostContract(c, 0);
  return c.status();
}

} // namespace glm::kernels
