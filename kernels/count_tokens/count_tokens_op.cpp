// count_tokens' plan adapter: operand 0 the step's tokens i32 [rows], then the step context
// (positions, sequence slots, sampling parameters); state 0 the token_counts, u32 [vocab] a
// sequence; no result.
#include "kernels/count_tokens/count_tokens_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/count_tokens/count_tokens.h"
#include "kernels/count_tokens/count_tokens_gpu.h"

namespace glm::kernels {
namespace {

int64_t vocabOf(const OpStep &step) { return step.state(0).unitBytes / 4; }

} // namespace

Expected<GpuStep> countTokensGpu(const OpStep &step) {
  ArgPack<CountTokensGpuArgs> p;
  p.bind(p.args.tokens, ArgSource::Operand, 0, "tokens");
  packStepContext(p, p.args.ctx, step, 1, /*paged=*/false);
  p.bind(p.args.params, ArgSource::Operand, 3, "params");
  p.bind(p.args.counts, ArgSource::State, 0, "counts");
  p.set(p.args.rows, step.rows(), "rows");
  p.set(p.args.vocab, vocabOf(step), "vocab");
  return GpuStep{{p.launch("kernels/count_tokens/count_tokens.cuh",
                           "glm::kernels::countTokensKernel", countTokensLaunch(step.rows()))}};
}

Status countTokensCpu(const OpStep &step, const HostStep &host) {
  // The CPU runs each sequence's rows packed, group b's from row g.first, with its context
  // entries at b.
  const auto *params = static_cast<const SampleWords *>(host.operand(3));
  auto *counts = reinterpret_cast<uint32_t *>(host.stateBytes(0));
  const auto groups = host.groups();
  for (size_t b = 0; b < groups.size(); ++b) {
    const HostRowGroup &g = groups[b];
    GLM_RETURN_IF_ERROR(countTokensRef({.tokens = host.i32In(0) + g.first,
                                        .positions = host.i32In(1) + g.first,
                                        .slots = host.i32In(2) + b,
                                        .params = params + b,
                                        .counts = counts,
                                        .rows = g.count,
                                        .rowsPerSequence = g.count,
                                        .vocab = vocabOf(step)}));
  }
  return Status::success();
}

Status countTokensCheck(const OpStep &step) {
  Contract c(step);
  c.counts(4, 0, 0, 0, 1);
  c.operandIs(0, DType::I32, {step.rows()});
  c.stepContext(1, /*paged=*/false);
  c.operandIs(3, DType::I32, {step.batch(), kSampleParamWords});
  c.check(c.ok() && step.state(0).unitBytes > 0, "state 0 holds no token counts");
  c.stateHolds(0, DType::I32, c.ok() ? vocabOf(step) : 0);
  return c.status();
}

} // namespace glm::kernels
