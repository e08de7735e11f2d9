// dsa_indexer's plan adapter: operands q [rows, heads · head_dim], k and gate [rows, head_dim],
// the head weights [rows, heads], then the step context (positions, sequence slots, page table);
// weight 0 ape (the pool position embedding); state 0 the pooled keys (one row per pool, in pages
// of the pool), state 1 each sequence's open pool (raw keys and gates of up to kpool - 1 tokens);
// result 0 the selected positions i32 [rows, width]; parameters num_heads, head_dim, kpool, topk.
#include "kernels/dsa_indexer/dsa_indexer_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/dsa_indexer/dsa_indexer.h"
#include "kernels/dsa_indexer/dsa_indexer_gpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace glm::kernels {
namespace {

struct IndexerShape {
  int64_t heads = 0, dim = 0, kpool = 1, topk = 0, width = 0;
};

IndexerShape shapeOf(const OpStep &step) {
  return {step.intParam("num_heads", 0), step.intParam("head_dim", 0),
          std::max<int64_t>(1, step.intParam("kpool", 1)), step.intParam("topk", 0),
          step.resultDim(0, 1)};
}

constexpr size_t kPageTable = 6; // the operand

/// The pooled keys a sequence can hold: its page-table row's pages times the pools a page holds.
int64_t maxPoolsOf(const OpStep &step, int64_t kpool) {
  return step.operandDim(kPageTable, 1) * (step.pageTokens() / kpool);
}

} // namespace

Expected<GpuStep> dsaIndexerGpu(const OpStep &step) {
  const IndexerShape s = shapeOf(step);
  if (step.stateCount() < 2) {
    return step.error(StatusCode::Internal, "the indexer has no open-pool tail state");
  }
  const int64_t rows = step.rows(), maxPools = maxPoolsOf(step, s.kpool);
  ArgPack<DsaIndexerGpuArgs> p;
  p.bind(p.args.q, ArgSource::Operand, 0, "q");
  p.bind(p.args.k, ArgSource::Operand, 1, "k");
  p.bind(p.args.gate, ArgSource::Operand, 2, "gate");
  p.bind(p.args.headWeights, ArgSource::Operand, 3, "headWeights");
  p.bind(p.args.ape, ArgSource::Weight, 0, "ape");
  p.bind(p.args.selected, ArgSource::Result, 0, "selected");
  p.bind(p.args.workspace, ArgSource::Workspace, 0, "workspace");
  packStepContext(p, p.args.ctx, step, 4, /*paged=*/true);
  packPagedState(p, p.args.keys, step, 0, step.pageTokens() / s.kpool, "keys");
  packSlotState(p, p.args.tail, step, 1, "tail");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.heads, s.heads, "heads");
  p.set(p.args.headDim, s.dim, "headDim");
  p.set(p.args.kpool, s.kpool, "kpool");
  p.set(p.args.topk, s.topk, "topk");
  p.set(p.args.width, s.width, "width");
  p.set(p.args.maxPools, maxPools, "maxPools");
  // Four kernels of one struct: append the step's keys, score the pools, filter, select.
  const char *header = "kernels/dsa_indexer/dsa_indexer.cuh";
  const std::string t = kernelTypeName(step.activation());
  const std::string state = kernelTypeName(step.state(0).element);
  GpuStep gpu;
  gpu.launches = {
      p.launch(header,
               kernelInstance("dsaIndexerAppendKernel",
                              {t, state, kernelTypeName(step.denseWeightType(0))}),
               dsaIndexerAppendLaunch(rows)),
      p.launch(header, kernelInstance("dsaIndexerScoreKernel", {t, state}),
               dsaIndexerScoreLaunch(rows, maxPools, s.heads, s.dim, step.target().smCount)),
      p.launch(header, "glm::kernels::dsaIndexerFilterKernel",
               dsaIndexerFilterLaunch(rows, maxPools)),
      p.launch(header, "glm::kernels::dsaIndexerSelectKernel", dsaIndexerSelectLaunch(rows))};
  gpu.workspaceBytes = static_cast<uint64_t>(dsaIndexerWorkspaceBytes(rows, maxPools));
  return gpu;
}

Status dsaIndexerCpu(const OpStep &step, const HostStep &host) {
  const IndexerShape s = shapeOf(step);
  const int64_t pageTokens = step.pageTokens();
  if (pageTokens % s.kpool != 0) {
    return invalidArgument("pages of ", pageTokens, " tokens do not hold whole pools of ", s.kpool);
  }
  if (step.stateCount() < 2) {
    return step.error(StatusCode::Internal, "the indexer has no open-pool tail state");
  }
  const int64_t d = s.dim, kpool = s.kpool;
  const int64_t poolsPerPage = pageTokens / kpool;
  const size_t rowBytes = static_cast<size_t>(d) * sizeof(float);
  for (const HostRowGroup &g : host.groups()) {
    // The reference kernel takes the sequence's keys contiguously: gather them from the pages
    // and the tail slot, run it, and write back what it appended.
    const int64_t before = g.length, after = before + g.count;
    const int64_t closed = before / kpool, closedAfter = after / kpool;
    std::vector<float> poolKeys(static_cast<size_t>(std::max<int64_t>(closedAfter, 1) * d));
    for (int64_t p = 0; p < closed; ++p) {
      std::memcpy(poolKeys.data() + p * d, pagedRow(step, host, 0, g.slot, p, poolsPerPage),
                  rowBytes);
    }
    auto *tail = reinterpret_cast<float *>(stateSlot(step, host, 1, g.slot));
    std::vector<float> openKeys(static_cast<size_t>(kpool * d)),
        openGates(static_cast<size_t>(kpool * d));
    for (int64_t r = 0; r < before % kpool; ++r) {
      std::memcpy(openKeys.data() + r * d, tail + r * 2 * d, rowBytes);
      std::memcpy(openGates.data() + r * d, tail + r * 2 * d + d, rowBytes);
    }
    DsaIndexerCache cache{.poolKeys = poolKeys.data(),
                          .maxPools = std::max<int64_t>(closedAfter, 1),
                          .openKeys = openKeys.data(),
                          .openGates = openGates.data(),
                          .length = before};
    GLM_RETURN_IF_ERROR(dsaIndexerRef({.q = host.f32In(0) + g.first * s.heads * d,
                                       .k = host.f32In(1) + g.first * d,
                                       .gate = host.f32In(2) + g.first * d,
                                       .headWeights = host.f32In(3) + g.first * s.heads,
                                       .ape = host.weight(0),
                                       .cache = &cache,
                                       .selected = host.i32Out(0) + g.first * s.width,
                                       .tokens = g.count,
                                       .heads = s.heads,
                                       .headDim = d,
                                       .topk = s.topk,
                                       .kpool = kpool,
                                       .alwaysSelectTail = s.width == s.topk + kpool - 1,
                                       .tieRule = host.tieRule()}));
    for (int64_t p = closed; p < closedAfter; ++p) {
      std::memcpy(pagedRow(step, host, 0, g.slot, p, poolsPerPage), poolKeys.data() + p * d,
                  rowBytes);
    }
    for (int64_t r = 0; r < after % kpool; ++r) {
      std::memcpy(tail + r * 2 * d, openKeys.data() + r * d, rowBytes);
      std::memcpy(tail + r * 2 * d + d, openGates.data() + r * d, rowBytes);
    }
  }
  return Status::success();
}

Status dsaIndexerCheck(const OpStep &step) {
  Contract c(step);
  c.counts(7, 1, 1, 1, 2);
  const int64_t heads = c.intParam("num_heads", 0, 1, 1 << 16);
  const int64_t dim = c.intParam("head_dim", 0, 1, 1 << 16);
  const int64_t kpool = c.intParam("kpool", 1, 1, 1 << 10);
  const int64_t topk = c.intParam("topk", 0, 1, 1 << 24);
  const int64_t rows = step.rows();
  c.check(!c.ok() || topk % kpool == 0, "topk ", topk, " is not a multiple of kpool ", kpool);
  c.operandIs(0, c.activation(), {rows, heads * dim});
  c.operandIs(1, c.activation(), {rows, dim});
  c.operandIs(2, c.activation(), {rows, dim});
  c.operandIs(3, c.activation(), {rows, heads});
  c.stepContext(4, /*paged=*/true);
  const Shape selected = c.result(0, DType::I32, 2);
  c.check(selected[0] == rows && (selected[1] == topk || selected[1] == topk + kpool - 1),
          "result 0 is ", Contract::shapeText(selected), ", its op selects [", rows, ", ", topk,
          "] or [", rows, ", ", topk + kpool - 1, "]");
  c.weightDense(0);
  c.weightHolds(0, kpool * dim);
  c.check(!c.ok() || step.pageTokens() % kpool == 0, "pages of ", step.pageTokens(),
          " tokens do not hold whole pools of ", kpool);
  c.pagedStateHolds(0, DType::F32, dim, step.pageTokens() / kpool);
  c.stateHolds(1, DType::F32, (kpool - 1) * 2 * dim);
  return c.status();
}

} // namespace glm::kernels
