// sample's plan adapter: operand 0 the logits f32 [rows, vocab], then the step context
// (positions, sequence slots, sampling parameters, logit_bias, token_mask); state 0 the
// token_counts; results the ids i32 and logprobs f32, [rows, 1 + kSampleTopLogprobs] each
// (sample.h); unit parameter greedy (argmax for every row).
#include "kernels/sample/sample_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/sample/sample.h"
#include "kernels/sample/sample_gpu.h"

namespace glm::kernels {

Expected<GpuStep> sampleGpu(const OpStep &step) {
  const int64_t vocab = step.operandDim(0, 1);
  ArgPack<SampleGpuArgs> p;
  p.bind(p.args.logits, ArgSource::Operand, 0, "logits");
  packStepContext(p, p.args.ctx, step, 1, /*paged=*/false);
  p.bind(p.args.params, ArgSource::Operand, 3, "params");
  p.bind(p.args.bias, ArgSource::Operand, 4, "bias");
  p.bind(p.args.mask, ArgSource::Operand, 5, "mask");
  p.bind(p.args.counts, ArgSource::State, 0, "counts");
  p.bind(p.args.processed, ArgSource::Workspace, 0, "processed");
  p.bind(p.args.ids, ArgSource::Result, 0, "ids");
  p.bind(p.args.logprobs, ArgSource::Result, 1, "logprobs");
  p.set(p.args.vocab, vocab, "vocab");
  p.set(p.args.greedy, step.intParam("greedy") ? 1 : 0, "greedy");
  GpuStep gpu{{p.launch("kernels/sample/sample.cuh", "glm::kernels::sampleProcessKernel",
                        sampleProcessLaunch(step.rows(), vocab)),
               p.launch("kernels/sample/sample.cuh", "glm::kernels::sampleKernel",
                        sampleLaunch(step.rows()))}};
  gpu.workspaceBytes = static_cast<uint64_t>(step.rows() * vocab) * sizeof(float);
  return gpu;
}

Status sampleCpu(const OpStep &step, const HostStep &host) {
  // The CPU runs each sequence's rows packed, group b's from row g.first, with its context
  // entries at b.
  constexpr int64_t kOut = 1 + kSampleTopLogprobs;
  const int64_t vocab = step.operandDim(0, 1);
  const auto *params = static_cast<const SampleWords *>(host.operand(3));
  const auto *mask = static_cast<const uint32_t *>(host.operand(5));
  const auto *counts = reinterpret_cast<const uint32_t *>(host.stateBytes(0));
  const auto groups = host.groups();
  for (size_t b = 0; b < groups.size(); ++b) {
    const HostRowGroup &g = groups[b];
    GLM_RETURN_IF_ERROR(sampleRef({.logits = host.f32In(0) + g.first * vocab,
                                   .positions = host.i32In(1) + g.first,
                                   .slots = host.i32In(2) + b,
                                   .params = params + b,
                                   .bias = host.i32In(4) + b * 2 * kSampleBiasEntries,
                                   .mask = mask + b * maskWords(vocab),
                                   .counts = counts,
                                   .ids = host.i32Out(0) + g.first * kOut,
                                   .logprobs = host.f32Out(1) + g.first * kOut,
                                   .rows = g.count,
                                   .vocab = vocab,
                                   .rowsPerSequence = g.count,
                                   .greedy = step.intParam("greedy").has_value()}));
  }
  return Status::success();
}

Status sampleCheck(const OpStep &step) {
  Contract c(step);
  c.counts(6, 2, 0, 0, 1);
  const Shape logits = c.operand(0, DType::F32, 2);
  const int64_t rows = logits[0], vocab = logits[1];
  c.stepContext(1, /*paged=*/false);
  c.operandIs(3, DType::I32, {step.batch(), kSampleParamWords});
  c.operandIs(4, DType::I32, {step.batch(), 2 * kSampleBiasEntries});
  c.operandIs(5, DType::I32, {step.batch(), maskWords(vocab)});
  c.stateHolds(0, DType::I32, vocab);
  c.resultIs(0, DType::I32, {rows, 1 + kSampleTopLogprobs});
  c.resultIs(1, DType::F32, {rows, 1 + kSampleTopLogprobs});
  return c.status();
}

} // namespace glm::kernels
