// next_embedding's plan adapter: operand 0 the step's token ids i32 [rows], operand 1 the draws
// i32 [rows or batch, 21], then the step context: operand 2 the positions, operand 3 the sampling
// parameters (their `following` words); weight 0 the table [vocab, hidden]; result 0 [rows,
// hidden]; parameter follow_input.
#include "kernels/next_embedding/next_embedding_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/next_embedding/next_embedding.h"
#include "kernels/next_embedding/next_embedding_gpu.h"

namespace glm::kernels {
namespace {

bool followsInput(const OpStep &step) { return step.intParam("follow_input", 0) != 0; }

} // namespace

Expected<GpuStep> nextEmbeddingGpu(const OpStep &step) {
  const int64_t hidden = step.resultDim(0, 1);
  ArgPack<NextEmbeddingGpuArgs> p;
  p.bind(p.args.ids, ArgSource::Operand, 0, "ids");
  p.bind(p.args.sampled, ArgSource::Operand, 1, "sampled");
  p.bind(p.args.positions, ArgSource::Operand, 2, "positions");
  p.bind(p.args.params, ArgSource::Operand, 3, "params");
  p.bind(p.args.table, ArgSource::Weight, 0, "table");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.rowsPerSequence, step.rowsPerSequence(), "rowsPerSequence");
  p.set(p.args.sampledRows, step.operandDim(1, 0), "sampledRows");
  p.set(p.args.rows, step.rows(), "rows");
  p.set(p.args.vocab, step.weight(0).shape[0], "vocab");
  p.set(p.args.hidden, hidden, "hidden");
  p.set(p.args.followInput, followsInput(step) ? 1 : 0, "followInput");
  return GpuStep{
      {p.launch("kernels/next_embedding/next_embedding.cuh",
                kernelInstance("nextEmbeddingKernel", {kernelTypeName(step.activation()),
                                                       kernelTypeName(step.denseWeightType(0))}),
                nextEmbeddingLaunch(step.rows(), hidden))}};
}

Status nextEmbeddingCpu(const OpStep &step, const HostStep &host) {
  // The CPU runs each sequence's rows packed, group b's from row g.first; the draws are packed
  // alike, or (after a last_rows head) one per group.
  const bool lastOnly = step.operandDim(1, 0) != step.rows();
  const int64_t hidden = step.resultDim(0, 1);
  const auto groups = host.groups();
  const auto *params = static_cast<const SampleWords *>(host.operand(3));
  for (size_t b = 0; b < groups.size(); ++b) {
    const HostRowGroup &g = groups[b];
    const int64_t drawn = lastOnly ? static_cast<int64_t>(b) : g.first;
    GLM_RETURN_IF_ERROR(nextEmbeddingRef({.ids = host.i32In(0) + g.first,
                                          .sampled = host.i32In(1) + drawn * kSampledIdsWidth,
                                          .sampledLastOnly = lastOnly,
                                          .positions = host.i32In(2) + g.first,
                                          .following = params[b].following - 1,
                                          .table = host.weight(0),
                                          .out = host.f32Out(0) + g.first * hidden,
                                          .rows = g.count,
                                          .followInput = followsInput(step)}));
  }
  return Status::success();
}

Status nextEmbeddingCheck(const OpStep &step) {
  Contract c(step);
  c.counts(4, 1, 1, 1, 0);
  c.operandIs(0, DType::I32, {step.rows()});
  const Shape sampled = c.operand(1, DType::I32, 2);
  c.check(sampled[1] == kSampledIdsWidth, "operand 1 has ", sampled[1],
          " columns, a sampler's ids have ", kSampledIdsWidth);
  c.check(sampled[0] == step.rows() || (followsInput(step) && sampled[0] == step.batch()),
          "operand 1 holds ", sampled[0], " rows' draws for ", step.rows(), " rows");
  c.operandIs(2, DType::I32, {step.rows()});
  c.operandIs(3, DType::I32, {step.batch(), kSampleParamWords});
  c.weightDense(0);
  const Shape table = c.weight(0, 2);
  c.resultIs(0, c.activation(), {step.rows(), table[1]});
  return c.status();
}

} // namespace glm::kernels
