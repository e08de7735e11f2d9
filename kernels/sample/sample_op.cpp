// sample's plan adapter: operand 0 logits f32 [rows, vocab], then the positions and the sampling
// parameters (i32 [batch, 8], sample_gpu.h), result 0 the token ids i32 [rows]; unit parameter
// greedy (argmax for every row).
#include "kernels/sample/sample_op.h"

#include "kernels/argmax/argmax.h"
#include "kernels/common/StepArgs.h"
#include "kernels/sample/sample_gpu.h"

namespace glm::kernels {

Expected<GpuStep> sampleGpu(const OpStep &step) {
  ArgPack<SampleGpuArgs> p;
  p.bind(p.args.logits, ArgSource::Operand, 0, "logits");
  p.bind(p.args.params, ArgSource::Operand, 2, "params");
  p.bind(p.args.ctx.positions, ArgSource::Operand, 1, "ctx.positions");
  p.set(p.args.ctx.rowsPerSequence, step.rowsPerSequence(), "ctx.rowsPerSequence");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.rows, step.rows(), "rows");
  p.set(p.args.vocab, step.operandDim(0, 1), "vocab");
  p.set(p.args.greedy, step.intParam("greedy") ? 1 : 0, "greedy");
  return GpuStep{{p.launch("kernels/sample/sample.cuh", "glm::kernels::sampleKernel",
                           sampleLaunch(step.rows()))}};
}

Status sampleCpu(const OpStep &step, const HostStep &host) {
  // Greedy when the op says so or the sequence's temperature (word 0 of its sampling
  // parameters, which the host zeroes by default) is 0.
  const int64_t vocab = step.operandDim(0, 1);
  const auto *params = static_cast<const float *>(host.operand(2));
  const bool greedy = step.intParam("greedy").has_value();
  const auto groups = host.groups();
  for (size_t b = 0; b < groups.size(); ++b) {
    if (!greedy && params[b * 8] != 0.0f) {
      return unimplemented("sampling at a temperature comes with the on-device sampler");
    }
    const HostRowGroup &g = groups[b];
    GLM_RETURN_IF_ERROR(argmaxRef({.logits = host.f32In(0) + g.first * vocab,
                                   .out = host.i32Out(0) + g.first,
                                   .rows = g.count,
                                   .vocab = vocab}));
  }
  return Status::success();
}

} // namespace glm::kernels
