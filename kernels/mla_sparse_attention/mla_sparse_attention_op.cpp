// mla_sparse_attention's plan adapter: operands q [rows, heads · qk_head_dim], the step's latent
// rows [rows, rank] and the indexer's selection i32 [rows, width], then the step context
// (positions, sequence slots, page table); weight 0 kv_b (plain, Q4 groups or fp8 blocks); state
// 0 the latent rows of every sequence (one per token, in pages of the pool); result 0
// [rows, heads · v_head_dim]; parameters num_heads, qk_head_dim, v_head_dim, scale.
#include "kernels/mla_sparse_attention/mla_sparse_attention_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention_gpu.h"

#include <cstring>
#include <vector>

namespace glm::kernels {
namespace {

struct MlaShape {
  int64_t heads = 0, rank = 0, width = 0, qkHeadDim = 0, vHeadDim = 0;
  float scale = 0;
};

MlaShape shapeOf(const OpStep &step) {
  MlaShape m;
  m.heads = step.intParam("num_heads", 0);
  m.qkHeadDim = step.intParam("qk_head_dim", 0);
  m.vHeadDim = step.intParam("v_head_dim", 0);
  m.scale = step.floatParam("scale", 0.0f);
  m.rank = step.operandDim(1, 1);
  m.width = step.operandDim(2, 1);
  return m;
}

} // namespace

Expected<GpuStep> mlaSparseAttentionGpu(const OpStep &step) {
  const MlaShape m = shapeOf(step);
  const int64_t rows = step.rows();
  // The attend kernel's form, and how many chunks each row's slots split into (workspace and
  // arguments follow both).
  const bool mma =
      mlaAttendUsesMma(step.activation() == DType::BF16,
                       static_cast<int64_t>(dtypeSize(step.state(0).element)), m.heads, m.rank);
  // Chunks for choiceRows: in a decode program every row's slots split as one row's do, so that
  // its partials combine in the same order whatever rows share the step.
  const int32_t chunks =
      mlaSparseAttentionChunks(step.choiceRows(), m.heads, m.width, mma, step.target().smCount);
  // kv_b as the arena holds it: plain, Q4 groups or fp8 blocks, one matrix [kv_b rows, rank].
  const WeightInfo kvB = step.weight(0);
  const DenseEncoding encoding = kvB.denseEncoding();
  const int64_t kvRows = m.heads * (m.qkHeadDim + m.vHeadDim);
  if (encoding != DenseEncoding::Plain &&
      (kvB.shape.rank != 2 || kvB.shape[0] != kvRows || kvB.shape[1] != m.rank)) {
    // The kernels find the sections after the codes from this shape.
    return step.error(StatusCode::InvalidArgument, "encoded kv_b is not one [", kvRows, ", ",
                      m.rank, "] matrix");
  }
  if (encoding == DenseEncoding::Q4 && m.rank % kQ4Group != 0) {
    return step.error(StatusCode::InvalidArgument, "Q4 kv_b needs kv_lora_rank (", m.rank,
                      ") a multiple of ", kQ4Group);
  }
  ArgPack<MlaSparseAttentionGpuArgs> p;
  p.bind(p.args.q, ArgSource::Operand, 0, "q");
  p.bind(p.args.latent, ArgSource::Operand, 1, "latent");
  p.bind(p.args.kvB, ArgSource::Weight, 0, "kvB");
  // The sections after the codes, addressed from the weight's slice, as linear binds them.
  if (encoding == DenseEncoding::Q4) {
    p.bind(p.args.kvBGroups, ArgSource::Weight, 0, "kvBGroups",
           static_cast<uint64_t>(q4GroupsOffset(1, kvRows, m.rank)));
  } else if (encoding == DenseEncoding::Fp8) {
    p.bind(p.args.kvBScaleInv, ArgSource::Weight, 0, "kvBScaleInv",
           static_cast<uint64_t>(fp8ScalesOffset(1, kvRows, m.rank)));
  }
  p.bind(p.args.selected, ArgSource::Operand, 2, "selected");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.bind(p.args.workspace, ArgSource::Workspace, 0, "workspace");
  packStepContext(p, p.args.ctx, step, 3, /*paged=*/true);
  packPagedState(p, p.args.latents, step, 0, step.pageTokens(), "latents");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.heads, m.heads, "heads");
  p.set(p.args.qkHeadDim, m.qkHeadDim, "qkHeadDim");
  p.set(p.args.vHeadDim, m.vHeadDim, "vHeadDim");
  p.set(p.args.rank, m.rank, "rank");
  p.set(p.args.width, m.width, "width");
  p.set(p.args.chunks, chunks, "chunks");
  p.set(p.args.scale, m.scale, "scale");
  // Three kernels of one struct: absorb kv_b into the queries, attend over the selected latents,
  // project the values out.
  const char *header = "kernels/mla_sparse_attention/mla_sparse_attention.cuh";
  const std::string t = kernelTypeName(step.activation());
  const std::string state = kernelTypeName(step.state(0).element);
  const std::string w = encoding == DenseEncoding::Q4    ? "glm::kernels::MlaQ4Groups"
                        : encoding == DenseEncoding::Fp8 ? "glm::kernels::Fp8E4m3"
                                                         : kernelTypeName(step.denseWeightType(0));
  GpuStep gpu;
  gpu.launches = {
      p.launch(header, kernelInstance("mlaAbsorbKernel", {t, state, w}),
               mlaAbsorbLaunch(rows, m.heads, m.rank)),
      p.launch(header, kernelInstance(mma ? "mlaAttendMmaKernel" : "mlaAttendKernel", {t, state}),
               mlaAttendLaunch(rows, m.heads, m.rank, chunks, mma)),
      p.launch(header, kernelInstance("mlaOutputKernel", {t, w}),
               mlaOutputLaunch(rows, m.heads, m.vHeadDim))};
  gpu.workspaceBytes =
      static_cast<uint64_t>(mlaSparseAttentionWorkspaceBytes(rows, m.heads, m.rank, chunks));
  return gpu;
}

Status mlaSparseAttentionCpu(const OpStep &step, const HostStep &host) {
  const MlaShape m = shapeOf(step);
  const int64_t pageTokens = step.pageTokens();
  const size_t rowBytes = static_cast<size_t>(m.rank) * sizeof(float);
  for (const HostRowGroup &g : host.groups()) {
    // Gather the sequence's latent rows from its pages, attend, write the new rows back.
    const int64_t before = g.length, after = before + g.count;
    std::vector<float> rows(static_cast<size_t>(after * m.rank));
    for (int64_t j = 0; j < before; ++j) {
      std::memcpy(rows.data() + j * m.rank, pagedRow(step, host, 0, g.slot, j, pageTokens),
                  rowBytes);
    }
    MlaLatentCache cache{.latents = rows.data(), .maxTokens = after, .length = before};
    GLM_RETURN_IF_ERROR(
        mlaSparseAttentionRef({.q = host.f32In(0) + g.first * m.heads * m.qkHeadDim,
                               .latent = host.f32In(1) + g.first * m.rank,
                               .kvB = host.weight(0),
                               .selected = host.i32In(2) + g.first * m.width,
                               .cache = &cache,
                               .out = host.f32Out(0) + g.first * m.heads * m.vHeadDim,
                               .tokens = g.count,
                               .heads = m.heads,
                               .qkHeadDim = m.qkHeadDim,
                               .vHeadDim = m.vHeadDim,
                               .kvLoraRank = m.rank,
                               .selectedWidth = m.width,
                               .scale = m.scale}));
    for (int64_t j = before; j < after; ++j) {
      std::memcpy(pagedRow(step, host, 0, g.slot, j, pageTokens), rows.data() + j * m.rank,
                  rowBytes);
    }
  }
  return Status::success();
}

Status mlaSparseAttentionCheck(const OpStep &step) {
  Contract c(step);
  c.counts(6, 1, 1, 1, 1);
  const int64_t heads = c.intParam("num_heads", 0, 1, 1 << 16);
  const int64_t qk = c.intParam("qk_head_dim", 0, 1, 1 << 16);
  const int64_t v = c.intParam("v_head_dim", 0, 1, 1 << 16);
  c.floatParam("scale", 0, 0, 1e30);
  const int64_t rows = step.rows();
  c.operandIs(0, c.activation(), {rows, heads * qk});
  const Shape latent = c.operand(1, c.activation(), 2);
  c.check(latent[0] == rows, "operand 1 has ", latent[0], " rows, the step ", rows);
  const Shape selected = c.operand(2, DType::I32, 2);
  c.check(selected[0] == rows, "operand 2 has ", selected[0], " rows, the step ", rows);
  c.stepContext(3, /*paged=*/true);
  c.weightDense(0);
  c.weightIs(0, {heads * (qk + v), latent[1]});
  c.pagedStateHolds(0, DType::F32, latent[1], step.pageTokens());
  c.resultIs(0, c.activation(), {rows, heads * v});
  return c.status();
}

} // namespace glm::kernels
