// Filling each op's kernel argument struct (kernels/<op>/<op>_gpu.h) from a plan step: the GPU
// counterpart of CpuEngine::runStep, with the same operand, weight and attribute conventions.
#include "runtime/cuda/StepArgs.h"

#include "kernels/add/add_gpu.h"
#include "kernels/concat/concat_gpu.h"
#include "kernels/convert/convert_gpu.h"
#include "kernels/dsa_indexer/dsa_indexer_gpu.h"
#include "kernels/embedding/embedding_gpu.h"
#include "kernels/exl3/exl3_gpu.h"
#include "kernels/exl3_moe/exl3_moe_gpu.h"
#include "kernels/exl3_moe/exl3_moe_prefill_gpu.h"
#include "kernels/expand_streams/expand_streams_gpu.h"
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "kernels/kda/kda_gpu.h"
#include "kernels/layer_norm/layer_norm_gpu.h"
#include "kernels/linear/linear_gpu.h"
#include "kernels/mhc_post/mhc_post_gpu.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention_gpu.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#include "kernels/moe_router/moe_router_gpu.h"
#include "kernels/rms_norm/rms_norm_gpu.h"
#include "kernels/sample/sample_gpu.h"
#include "kernels/short_conv/short_conv_gpu.h"
#include "kernels/stream_mean/stream_mean_gpu.h"
#include "kernels/swiglu/swiglu_gpu.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/PlanWeights.h"

#include <cmath>
#include <cstring>

namespace glm::cuda {
namespace {

template <typename Args> std::vector<uint8_t> bytesOf(const Args &args) {
  std::vector<uint8_t> bytes(sizeof(Args));
  std::memcpy(bytes.data(), &args, sizeof(Args));
  return bytes;
}

uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

int64_t activationBytes(const runtime::StepView &v) {
  return v.activationType() == plan::ElementType::F32 ? 4 : 2;
}

/// The global id of this rank's first expert: with experts split over ranks, rank r holds ids
/// [r E, (r + 1) E).
int32_t firstExpertOf(const runtime::StepView &v, int rank, int64_t experts) {
  return v.intAttr("expert_shards", 1) > 1 ? static_cast<int32_t>(rank * experts) : 0;
}

/// The page-table width of a program (0 without a page table).
int64_t maxPagesOf(const plan::Program &program) {
  for (const plan::IoSlot *io : *program.io()) {
    if (io->kind() == plan::IoKind::PageTable) {
      return io->tensor()->shape()->Get(1);
    }
  }
  return 0;
}

/// The open-pool tail slot of an indexer's key state: the state named "<keys>.tail".
const plan::StateLayout *tailOf(const runtime::StepView &v) {
  const std::string name = v.state(0).name()->str() + ".tail";
  for (const plan::StateLayout *s : *v.plan().states()) {
    if (s->name()->str() == name) {
      return s;
    }
  }
  return nullptr;
}

} // namespace

int64_t maxPoolsOf(const runtime::StepView &v) {
  const int64_t pageTokens = v.plan().state_pool()->page_tokens();
  return maxPagesOf(v.program()) * (pageTokens / v.intAttr("kpool", 1));
}

MlaShape mlaShapeOf(const runtime::StepView &v) {
  MlaShape m;
  m.heads = v.intAttr("num_heads");
  m.rank = runtime::StepView::dim(v.operand(1), 1);
  m.width = runtime::StepView::dim(v.operand(2), 1);
  m.mma = kernels::mlaAttendUsesMma(v.activationType() == plan::ElementType::BF16,
                                    runtime::elementSize(v.state(0).element()), m.heads, m.rank);
  m.chunks = kernels::mlaSparseAttentionChunks(v.rows(), m.heads, m.width, m.mma,
                                               v.plan().target()->sm_count());
  return m;
}

MoeShape moeShapeOf(const runtime::StepView &v) {
  const plan::WeightBinding &gate = v.weight(0);
  MoeShape m;
  m.experts = gate.rank_shape()->Get(0);
  m.inter = gate.rank_shape()->Get(1);
  m.hidden = gate.rank_shape()->Get(2);
  m.topK = runtime::StepView::dim(v.operand(1), 1);
  const bool mma = v.activationType() == plan::ElementType::BF16 &&
                   denseElement(gate) == plan::ElementType::BF16;
  m.path = kernels::moeExpertsPathFor(mma, v.rows(), m.hidden, m.inter);
  bool exl3 = v.activationType() == plan::ElementType::BF16;
  for (size_t i = 0; i < 3; ++i) {
    exl3 = exl3 && v.weight(i).format() == plan::WeightFormat::EXL3;
  }
  Expected<Exl3ArenaLayout> layout = exl3 ? exl3BindingLayout(gate) : invalidArgument("dense");
  m.exl3Bits = layout.ok() ? layout->slotBits : 0;
  // The kernels' shared memory grows with the tokens (decode) and K: beyond the target's (GB10's
  // 99 KB per block) the next path takes over.
  const uint32_t sharedMemory = v.plan().target()->shared_memory_per_block();
  if (layout.ok() && m.topK <= kernels::kExl3MoeMaxTopK && m.topK <= kernels::kMoeMaxTopK) {
    if (v.rows() <= kernels::kExl3MoeMaxTokens && m.experts <= kernels::kExl3MoeMaxExperts &&
        kernels::exl3MoeSharedBytes(kernels::exl3MoeGroups(v.rows()), m.exl3Bits) <= sharedMemory) {
      m.exl3 = Exl3MoePath::FusedDecode;
    } else if (kernels::exl3MoePrefillSharedBytes(m.exl3Bits) <= sharedMemory) {
      m.exl3 = Exl3MoePath::FusedPrefill;
    }
  }
  m.exl3Codebook = static_cast<int>(Exl3Codebook::Mcg);
  return m;
}

plan::ElementType denseElement(const plan::WeightBinding &weight) {
  return weight.format() == plan::WeightFormat::EXL3 ? plan::ElementType::BF16 : weight.element();
}

namespace {

/// The op's own scratch, before any EXL3 staging.
uint64_t opScratchBytes(const runtime::StepView &v) {
  const int64_t rows = v.rows();
  switch (v.step().op()) {
  case plan::OpKind::MoeRouter:
    return static_cast<uint64_t>(rows * v.weight(0).rank_shape()->Get(0)) * sizeof(float);
  case plan::OpKind::MoeExperts: {
    const MoeShape m = moeShapeOf(v);
    if (m.exl3 == Exl3MoePath::FusedDecode) {
      return static_cast<uint64_t>(kernels::exl3MoeScratchBytes(rows, m.topK, m.hidden, m.inter));
    }
    if (m.exl3 == Exl3MoePath::FusedPrefill) {
      return static_cast<uint64_t>(
          kernels::exl3MoePrefillScratchBytes(rows, m.topK, m.experts, m.hidden, m.inter));
    }
    return static_cast<uint64_t>(kernels::moeExpertsScratch(m.path, rows, m.topK, m.experts,
                                                            m.hidden, m.inter, activationBytes(v))
                                     .bytes);
  }
  case plan::OpKind::DsaIndexer:
    return static_cast<uint64_t>(kernels::dsaIndexerWorkspaceBytes(rows, maxPoolsOf(v)));
  case plan::OpKind::MlaSparseAttention: {
    const MlaShape m = mlaShapeOf(v);
    return static_cast<uint64_t>(
        kernels::mlaSparseAttentionWorkspaceBytes(rows, m.heads, m.rank, m.chunks));
  }
  default:
    return 0;
  }
}

} // namespace

const Exl3Staging::Weight *Exl3Staging::find(size_t index) const {
  for (const Weight &w : weights) {
    if (w.index == index) {
      return &w;
    }
  }
  return nullptr;
}

Expected<Exl3Staging> exl3StagingOf(const runtime::StepView &v) {
  Exl3Staging s;
  s.end = opScratchBytes(v);
  if (v.step().op() == plan::OpKind::MoeExperts && moeShapeOf(v).exl3 != Exl3MoePath::Staged) {
    return s; // the fused kernels read the trellises themselves
  }
  for (size_t i = 0; i < v.weightCount(); ++i) {
    if (v.weight(i).format() != plan::WeightFormat::EXL3) {
      continue;
    }
    if (v.step().op() != plan::OpKind::Linear && v.step().op() != plan::OpKind::MoeExperts) {
      return unimplemented("step ", v.name(), " (", plan::EnumNameOpKind(v.step().op()),
                           ") reads EXL3 weight ", v.weight(i).name()->str(),
                           ": only linear and routed-expert steps take EXL3 weights");
    }
    GLM_ASSIGN_OR_RETURN(Exl3ArenaLayout layout, exl3BindingLayout(v.weight(i)));
    if (s.weights.empty() && v.step().op() == plan::OpKind::MoeExperts) {
      s.routed = true;
      s.maskOffset = align256(s.end);
      s.end = s.maskOffset + static_cast<uint64_t>(layout.matrices) * 4;
    }
    const uint64_t offset = align256(s.end);
    s.end = offset + static_cast<uint64_t>(layout.matrices * layout.out * layout.in) * 2;
    s.weights.push_back({i, layout, offset});
  }
  return s;
}

Expected<uint64_t> stepWorkspaceBytes(const runtime::StepView &v) {
  GLM_ASSIGN_OR_RETURN(Exl3Staging staging, exl3StagingOf(v));
  return staging.end;
}

namespace {

/// The op's kernels' argument structs, with the EXL3 weights of `staging` read from their
/// reconstructed copies.
Expected<std::vector<std::vector<uint8_t>>>
buildOpArgs(const runtime::StepView &v, const DeviceLayout &d, const Exl3Staging &staging) {
  using runtime::StepView;
  const plan::Step &step = v.step();
  auto weightPtr = [&](size_t i) -> const void * {
    if (!v.hasWeight(i)) {
      return nullptr;
    }
    if (const Exl3Staging::Weight *w = staging.find(i)) {
      return static_cast<const uint8_t *>(d.workspace) + w->offset;
    }
    return reinterpret_cast<const void *>(d.address(*v.weight(i).slice()));
  };
  // State i of the step as a per-sequence slot layout.
  auto slotState = [&](size_t i) {
    const plan::StateLayout &s = v.state(i);
    return kernels::SlotState{reinterpret_cast<uint8_t *>(d.address(*s.slice())),
                              static_cast<int64_t>(s.unit_bytes())};
  };
  // State i of the step as a paged layout of `unitsPerPage` rows a page.
  auto pagedState = [&](size_t i, int64_t unitsPerPage) {
    const plan::StateLayout &s = v.state(i);
    return kernels::PagedState{reinterpret_cast<uint8_t *>(d.address(*s.slice())),
                               static_cast<int64_t>(v.plan().state_pool()->page_bytes()),
                               static_cast<int64_t>(s.offset_in_page()),
                               static_cast<int64_t>(s.unit_bytes()),
                               static_cast<int32_t>(unitsPerPage)};
  };
  using Args = std::vector<std::vector<uint8_t>>;
  const int64_t rows = v.rows();
  const plan::TensorRef *in0 = v.operandCount() > 0 ? &v.operand(0) : nullptr;
  switch (step.op()) {
  case plan::OpKind::Embedding:
    return Args{bytesOf(kernels::EmbeddingGpuArgs{
        d.ptr(*in0), weightPtr(0), d.mutablePtr(v.result(0)), rows,
        v.weight(0).rank_shape()->Get(0), StepView::dim(v.result(0), 1), 1})};
  case plan::OpKind::ExpandStreams:
    return Args{bytesOf(kernels::ExpandStreamsGpuArgs{d.ptr(*in0), d.mutablePtr(v.result(0)), rows,
                                                      StepView::dim(v.result(0), 1),
                                                      StepView::dim(v.result(0), 2)})};
  case plan::OpKind::StreamMean:
    return Args{
        bytesOf(kernels::StreamMeanGpuArgs{d.ptr(*in0), d.mutablePtr(v.result(0)), rows,
                                           StepView::dim(*in0, 1), StepView::dim(*in0, 2)})};
  case plan::OpKind::RmsNorm: {
    const int64_t width = StepView::dim(*in0, 1);
    const int64_t group = v.intAttr("group", width);
    return Args{
        bytesOf(kernels::RmsNormGpuArgs{d.ptr(*in0), weightPtr(0), d.mutablePtr(v.result(0)),
                                        rows * (width / group), group, v.floatAttr("eps", 1e-5f)})};
  }
  case plan::OpKind::LayerNorm:
    return Args{bytesOf(kernels::LayerNormGpuArgs{
        d.ptr(*in0), weightPtr(0), weightPtr(1), d.mutablePtr(v.result(0)), rows,
        StepView::dim(*in0, 1), v.floatAttr("eps", 1e-5f)})};
  case plan::OpKind::MhcPre:
    return Args{bytesOf(kernels::MhcPreGpuArgs{
        d.ptr(*in0), weightPtr(0), weightPtr(1), weightPtr(2), nullptr, d.mutablePtr(v.result(1)),
        d.mutablePtr(v.result(2)), d.mutablePtr(v.result(0)), rows, StepView::dim(*in0, 2),
        static_cast<int32_t>(v.intAttr("sinkhorn_iters", 20)), v.floatAttr("norm_eps", 1e-5f),
        v.floatAttr("hc_eps", 1e-6f)})};
  case plan::OpKind::MhcPost:
    return Args{bytesOf(kernels::MhcPostGpuArgs{
        d.ptr(*in0), d.ptr(v.operand(3)), d.ptr(v.operand(1)), d.ptr(v.operand(2)),
        d.mutablePtr(v.result(0)), rows, StepView::dim(v.operand(3), 2)})};
  case plan::OpKind::SwiGlu: {
    const int64_t width = StepView::dim(*in0, 1);
    return Args{
        bytesOf(kernels::SwigluGpuArgs{d.ptr(*in0), d.ptr(v.operand(1)), d.mutablePtr(v.result(0)),
                                       rows, width, width, v.floatAttr("limit", INFINITY)})};
  }
  case plan::OpKind::Add:
    return Args{bytesOf(
        kernels::AddGpuArgs{d.ptr(*in0), d.ptr(v.operand(1)), d.mutablePtr(v.result(0)),
                            rows * (in0->shape()->size() > 1 ? StepView::dim(*in0, 1) : 1)})};
  case plan::OpKind::Concat: {
    kernels::ConcatGpuArgs a{};
    for (size_t i = 0; i < v.operandCount() && i < kernels::kConcatMaxInputs; ++i) {
      a.inputs[i] = d.ptr(v.operand(i));
      a.widths[i] = StepView::dim(v.operand(i), 1);
    }
    a.out = d.mutablePtr(v.result(0));
    a.rows = rows;
    a.count = static_cast<int32_t>(v.operandCount());
    return Args{bytesOf(a)};
  }
  case plan::OpKind::ShortConv: {
    const plan::WeightBinding &w = v.weight(0);
    const int64_t kernelSize = w.rank_shape()->Get(w.rank_shape()->size() - 1);
    return Args{bytesOf(kernels::ShortConvGpuArgs{
        d.ptr(*in0), weightPtr(0), d.mutablePtr(v.result(0)), slotState(0), d.context,
        StepView::dim(*in0, 1), static_cast<int32_t>(kernelSize), 1})};
  }
  case plan::OpKind::Kda: {
    const int32_t heads = static_cast<int32_t>(v.intAttr("num_heads"));
    const int32_t dim = static_cast<int32_t>(v.intAttr("head_dim"));
    return Args{bytesOf(kernels::KdaGpuArgs{
        d.ptr(*in0), d.ptr(v.operand(1)), d.ptr(v.operand(2)), d.ptr(v.operand(3)),
        d.ptr(v.operand(4)), weightPtr(0), weightPtr(1), d.mutablePtr(v.result(0)), slotState(0),
        d.context, heads, dim, dim, v.floatAttr("lower_bound", -5.0f), 1e-6f})};
  }
  case plan::OpKind::GatedNorm: {
    const int64_t width = StepView::dim(*in0, 1);
    const int64_t group = v.intAttr("group", width);
    return Args{bytesOf(kernels::GatedRmsNormGpuArgs{
        d.ptr(*in0), d.ptr(v.operand(1)), weightPtr(0), d.mutablePtr(v.result(0)),
        rows * (width / group), group, v.floatAttr("eps", 1e-5f)})};
  }
  case plan::OpKind::Linear:
    return Args{bytesOf(kernels::LinearGpuArgs{
        d.ptr(*in0), weightPtr(0), nullptr, weightPtr(1), d.mutablePtr(v.result(0)), rows,
        StepView::dim(*in0, 1), StepView::dim(v.result(0), 1),
        v.hasWeight(1) && v.weight(1).element() == plan::ElementType::BF16 ? 1 : 0})};
  case plan::OpKind::MoeRouter: {
    kernels::MoeRouterGpuArgs a{};
    a.x = d.ptr(*in0);
    a.weight = weightPtr(0);
    a.correctionBias = weightPtr(1);
    a.scores = reinterpret_cast<float *>(d.workspace);
    a.expertIds = reinterpret_cast<int32_t *>(d.mutablePtr(v.result(0)));
    a.expertWeights = d.mutablePtr(v.result(1));
    a.tokens = rows;
    a.hidden = StepView::dim(*in0, 1);
    a.experts = v.weight(0).rank_shape()->Get(0);
    a.topK = v.intAttr("top_k");
    a.nGroup = v.intAttr("n_group", 1);
    a.topkGroup = v.intAttr("topk_group", 1);
    a.normTopkProb = v.intAttr("norm_topk_prob", 1) != 0;
    a.biasBf16 = v.hasWeight(1) && v.weight(1).element() == plan::ElementType::BF16;
    a.scaling = v.floatAttr("scaling", 1.0f);
    return Args(2, bytesOf(a));
  }
  case plan::OpKind::MoeExperts: {
    const MoeShape m = moeShapeOf(v);
    if (m.exl3 != Exl3MoePath::Staged) {
      kernels::Exl3MoeGpuArgs a{};
      a.x = static_cast<const kernels::Bf16 *>(d.ptr(*in0));
      a.expertIds = reinterpret_cast<const int32_t *>(d.ptr(v.operand(1)));
      a.expertWeights = static_cast<const kernels::Bf16 *>(d.ptr(v.operand(2)));
      kernels::Exl3GpuWeights *projections[] = {&a.gate, &a.up, &a.down};
      for (size_t i = 0; i < 3; ++i) {
        GLM_ASSIGN_OR_RETURN(Exl3ArenaLayout layout, exl3BindingLayout(v.weight(i)));
        *projections[i] = kernels::exl3GpuWeights(weightPtr(i), layout);
      }
      a.out = static_cast<kernels::Bf16 *>(d.mutablePtr(v.result(0)));
      a.tokens = rows;
      a.hidden = m.hidden;
      a.inter = m.inter;
      a.experts = m.experts;
      a.topK = m.topK;
      a.firstExpert = firstExpertOf(v, d.rank, m.experts);
      a.limit = v.floatAttr("limit", INFINITY);
      if (m.exl3 == Exl3MoePath::FusedPrefill) {
        // One struct serves all six launches (the route and combine kernels read its leading
        // MoeExpertsGpuArgs).
        return Args(kernels::exl3MoePrefillLaunches(m.exl3Bits, m.exl3Codebook, rows, m.hidden,
                                                    m.inter, m.experts, m.topK)
                        .size(),
                    bytesOf(kernels::exl3MoePrefillBindScratch(a, d.workspace)));
      }
      kernels::exl3MoeBindScratch(a, d.workspace);
      return Args(kernels::exl3MoeLaunches(m.exl3Bits, m.exl3Codebook, rows, m.hidden, m.inter,
                                           m.experts, m.topK)
                      .size(),
                  bytesOf(a));
    }
    kernels::MoeExpertsGpuArgs a{};
    a.x = d.ptr(*in0);
    a.expertIds = reinterpret_cast<const int32_t *>(d.ptr(v.operand(1)));
    a.expertWeights = d.ptr(v.operand(2));
    a.gate = weightPtr(0);
    a.up = weightPtr(1);
    a.down = weightPtr(2);
    a.out = d.mutablePtr(v.result(0));
    a.tokens = rows;
    a.experts = m.experts;
    a.inter = m.inter;
    a.hidden = m.hidden;
    a.topK = m.topK;
    a.firstExpert = firstExpertOf(v, d.rank, a.experts);
    a.limit = v.floatAttr("limit", INFINITY);
    kernels::moeExpertsBindScratch(a, m.path, d.workspace, activationBytes(v));
    return Args(
        kernels::moeExpertsLaunches(m.path, "", "", rows, m.hidden, m.inter, m.experts, m.topK)
            .size(),
        bytesOf(a));
  }
  case plan::OpKind::Sample:
    return Args{bytesOf(
        kernels::SampleGpuArgs{reinterpret_cast<const float *>(d.ptr(*in0)),
                               reinterpret_cast<const int32_t *>(d.ptr(v.operand(2))), d.context,
                               reinterpret_cast<int32_t *>(d.mutablePtr(v.result(0))), rows,
                               StepView::dim(*in0, 1), v.attribute("greedy") != nullptr ? 1 : 0})};
  case plan::OpKind::DsaIndexer: {
    const plan::StateLayout *tail = tailOf(v);
    if (tail == nullptr) {
      return internalError("indexer state ", v.state(0).name()->str(), " has no tail slot");
    }
    const int64_t kpool = v.intAttr("kpool");
    kernels::DsaIndexerGpuArgs a{};
    a.q = d.ptr(*in0);
    a.k = d.ptr(v.operand(1));
    a.gate = d.ptr(v.operand(2));
    a.headWeights = d.ptr(v.operand(3));
    a.ape = weightPtr(0);
    a.selected = reinterpret_cast<int32_t *>(d.mutablePtr(v.result(0)));
    a.workspace = d.workspace;
    a.ctx = d.context;
    a.keys = pagedState(0, v.plan().state_pool()->page_tokens() / kpool);
    a.tail = kernels::SlotState{reinterpret_cast<uint8_t *>(d.address(*tail->slice())),
                                static_cast<int64_t>(tail->unit_bytes())};
    a.rows = static_cast<int32_t>(rows);
    a.heads = static_cast<int32_t>(v.intAttr("num_heads"));
    a.headDim = static_cast<int32_t>(v.intAttr("head_dim"));
    a.kpool = static_cast<int32_t>(kpool);
    a.topk = static_cast<int32_t>(v.intAttr("topk"));
    a.width = static_cast<int32_t>(StepView::dim(v.result(0), 1));
    a.maxPools = static_cast<int32_t>(maxPoolsOf(v));
    return Args(4, bytesOf(a));
  }
  case plan::OpKind::MlaSparseAttention: {
    const MlaShape m = mlaShapeOf(v);
    kernels::MlaSparseAttentionGpuArgs a{};
    a.q = d.ptr(*in0);
    a.latent = d.ptr(v.operand(1));
    a.kvB = weightPtr(0);
    a.selected = reinterpret_cast<const int32_t *>(d.ptr(v.operand(2)));
    a.out = d.mutablePtr(v.result(0));
    a.workspace = d.workspace;
    a.ctx = d.context;
    a.latents = pagedState(0, v.plan().state_pool()->page_tokens());
    a.rows = static_cast<int32_t>(rows);
    a.heads = static_cast<int32_t>(m.heads);
    a.qkHeadDim = static_cast<int32_t>(v.intAttr("qk_head_dim"));
    a.vHeadDim = static_cast<int32_t>(v.intAttr("v_head_dim"));
    a.rank = static_cast<int32_t>(m.rank);
    a.width = static_cast<int32_t>(m.width);
    a.chunks = m.chunks;
    a.scale = v.floatAttr("scale");
    return Args(3, bytesOf(a));
  }
  case plan::OpKind::Convert:
    return Args{bytesOf(kernels::ConvertGpuArgs{d.ptr(*in0), d.mutablePtr(v.result(0)),
                                                rows * StepView::dim(*in0, 1)})};
  default:
    break;
  }
  return unimplemented("no CUDA kernel arguments for op ", plan::EnumNameOpKind(step.op()),
                       " yet (step ", v.name(), ")");
}

} // namespace

Expected<std::vector<std::vector<uint8_t>>> buildStepArgs(const runtime::StepView &v,
                                                          const DeviceLayout &d) {
  GLM_ASSIGN_OR_RETURN(Exl3Staging staging, exl3StagingOf(v));
  GLM_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> op, buildOpArgs(v, d, staging));
  if (staging.weights.empty()) {
    return op;
  }
  // The staging launches come first, in selectStepKernels' order: the mask, then one
  // reconstruction per EXL3 weight.
  std::vector<std::vector<uint8_t>> args;
  auto *workspace = static_cast<uint8_t *>(d.workspace);
  auto *mask =
      staging.routed ? reinterpret_cast<int32_t *>(workspace + staging.maskOffset) : nullptr;
  if (staging.routed) {
    const int64_t experts = staging.weights.front().layout.matrices;
    args.push_back(
        bytesOf(kernels::Exl3SelectGpuArgs{reinterpret_cast<const int32_t *>(d.ptr(v.operand(1))),
                                           v.rows() * runtime::StepView::dim(v.operand(1), 1),
                                           firstExpertOf(v, d.rank, experts), experts, mask}));
  }
  for (const Exl3Staging::Weight &w : staging.weights) {
    args.push_back(bytesOf(kernels::Exl3ReconstructGpuArgs{
        kernels::exl3GpuWeights(
            reinterpret_cast<const void *>(d.address(*v.weight(w.index).slice())), w.layout),
        mask, reinterpret_cast<kernels::Bf16 *>(workspace + w.offset)}));
  }
  args.insert(args.end(), std::make_move_iterator(op.begin()), std::make_move_iterator(op.end()));
  return args;
}

} // namespace glm::cuda
