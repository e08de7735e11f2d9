// embedding's plan adapter: operand 0 token ids i32 [rows], weight 0 the table [vocab, hidden],
// result 0 [rows, hidden].
#include "kernels/embedding/embedding_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/embedding/embedding.h"
#include "kernels/embedding/embedding_gpu.h"

namespace glm::kernels {

Expected<GpuStep> embeddingGpu(const OpStep &step) {
  const int64_t hidden = step.resultDim(0, 1);
  ArgPack<EmbeddingGpuArgs> p;
  p.bind(p.args.tokenIds, ArgSource::Operand, 0, "tokenIds");
  p.bind(p.args.table, ArgSource::Weight, 0, "table");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.tokens, step.rows(), "tokens");
  p.set(p.args.vocab, step.weight(0).shape[0], "vocab");
  p.set(p.args.hidden, hidden, "hidden");
  p.set(p.args.copies, 1, "copies");
  return GpuStep{
      {p.launch("kernels/embedding/embedding.cuh",
                kernelInstance("embeddingKernel", {kernelTypeName(step.activation()),
                                                   kernelTypeName(step.denseWeightType(0))}),
                embeddingLaunch(step.rows(), hidden))}};
}

Status embeddingCpu(const OpStep &step, const HostStep &host) {
  return embeddingRef({.tokenIds = host.i32In(0),
                       .table = host.weight(0),
                       .out = host.f32Out(0),
                       .tokens = host.rows(),
                       .copies = 1});
}

Status embeddingCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 1, 1, 1, 0);
  c.operandIs(0, DType::I32, {step.rows()});
  c.weightDense(0);
  const Shape table = c.weight(0, 2);
  c.resultIs(0, c.activation(), {step.rows(), table[1]});
  return c.status();
}

} // namespace glm::kernels
