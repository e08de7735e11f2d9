// moe_experts' plan adapter: operand 0 x [rows, hidden], operand 1 the expert ids i32 [rows, top_k]
// (global ids; with experts split over ranks, rank r holds [r E, (r + 1) E)), operand 2 their
// weights [rows, top_k], weights gate and up [experts, inter, hidden] and down [experts, hidden,
// inter] (dense, or EXL3), result 0 [rows, hidden]; parameters limit (the SwiGLU clamp) and
// expert_shards.
//
// Which kernels run: a bf16 step whose three projections are all EXL3 takes the fused kernels of
// kernels/exl3_moe, decoding in registers with no staging: those for decode when the tokens fit
// the target's shared memory per block (99 KB on a GB10: 64 tokens there), else those for prefill.
// Anything else runs kernels/moe_experts' dense kernels, on staged bf16 copies of EXL3 experts.
#include "kernels/moe_experts/moe_experts_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/exl3/exl3.h"
#include "kernels/exl3/exl3_format.h"
#include "kernels/exl3/exl3_staging.h"
#include "kernels/moe_experts/exl3_moe_gpu.h"
#include "kernels/moe_experts/exl3_moe_prefill_gpu.h"
#include "kernels/moe_experts/moe_experts.h"
#include "kernels/moe_experts/moe_experts_gpu.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace glm::kernels {
namespace {

enum class Exl3MoePath { Staged, FusedDecode, FusedPrefill };

/// This rank's experts, their sizes and the kernels that run them. The fused kernels' fast path is
/// compiled for `exl3Bits` (the plan's K, the checkpoint's largest) and `exl3Codebook`; matrices of
/// another K or codebook take their generic decoder.
struct MoeShape {
  int64_t experts = 0, inter = 0, hidden = 0, topK = 0;
  MoeExpertsPath path = MoeExpertsPath::Decode;
  Exl3MoePath exl3 = Exl3MoePath::Staged;
  int exl3Bits = 0;
  // MCG, the deployed checkpoints': the plan does not record the codebook.
  int exl3Codebook = static_cast<int>(Exl3Codebook::Mcg);
  float limit = INFINITY;
  bool sharded = false; // experts split over ranks
};

MoeShape shapeOf(const OpStep &step) {
  const WeightInfo gate = step.weight(0);
  MoeShape m;
  m.experts = gate.shape[0];
  m.inter = gate.shape[1];
  m.hidden = gate.shape[2];
  m.topK = step.operandDim(1, 1);
  m.limit = step.floatParam("limit", INFINITY);
  m.sharded = step.intParam("expert_shards", 1) > 1;
  const int64_t rows = step.rows();
  const bool bf16 = step.activation() == DType::BF16;
  // The path for choiceRows: a decode program's tokens take the decode kernels, whose dot
  // products do not depend on which tokens share an expert; the grouped kernels' do.
  m.path = moeExpertsPathFor(bf16 && step.denseWeightType(0) == DType::BF16, step.choiceRows(),
                             m.hidden, m.inter);
  bool exl3 = bf16;
  for (size_t i = 0; i < 3; ++i) {
    exl3 = exl3 && step.weight(i).exl3;
  }
  m.exl3Bits = exl3 ? gate.exl3Geometry.slotBits : 0;
  // The kernels' shared memory grows with the tokens (decode) and K: beyond the target's the next
  // path takes over.
  const uint32_t sharedMemory = step.target().sharedMemoryPerBlock;
  if (exl3 && m.topK <= kExl3MoeMaxTopK && m.topK <= kMoeMaxTopK) {
    if (rows <= kExl3MoeMaxTokens && m.experts <= kExl3MoeMaxExperts &&
        exl3MoeSharedBytes(exl3MoeGroups(rows), m.exl3Bits) <= sharedMemory) {
      m.exl3 = Exl3MoePath::FusedDecode;
    } else if (exl3MoePrefillSharedBytes(m.exl3Bits) <= sharedMemory) {
      m.exl3 = Exl3MoePath::FusedPrefill;
    }
  }
  return m;
}

/// The first global expert this rank holds: rank · experts when experts are split over ranks.
template <typename Args> void packFirstExpert(ArgPack<Args> &p, int32_t &field, const MoeShape &m) {
  if (m.sharded) {
    p.rankTimes(field, m.experts, "firstExpert");
  } else {
    p.set(field, 0, "firstExpert");
  }
}

/// The fields of MoeExpertsGpuArgs that every path fills alike (the fused prefill kernels' route
/// and combine launches read them too).
template <typename Args>
void packMoeCommon(ArgPack<Args> &p, MoeExpertsGpuArgs &a, const OpStep &step, const MoeShape &m,
                   const std::string &prefix) {
  p.bind(a.x, ArgSource::Operand, 0, (prefix + "x").c_str());
  p.bind(a.expertIds, ArgSource::Operand, 1, (prefix + "expertIds").c_str());
  p.bind(a.expertWeights, ArgSource::Operand, 2, (prefix + "expertWeights").c_str());
  p.bind(a.out, ArgSource::Result, 0, (prefix + "out").c_str());
  p.set(a.tokens, step.rows(), (prefix + "tokens").c_str());
  p.set(a.hidden, m.hidden, (prefix + "hidden").c_str());
  p.set(a.inter, m.inter, (prefix + "inter").c_str());
  p.set(a.experts, m.experts, (prefix + "experts").c_str());
  p.set(a.topK, m.topK, (prefix + "topK").c_str());
  p.set(a.limit, m.limit, (prefix + "limit").c_str());
}

GpuStep fusedDecode(const OpStep &step, const MoeShape &m) {
  const int64_t rows = step.rows();
  ArgPack<Exl3MoeGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  p.bind(p.args.expertIds, ArgSource::Operand, 1, "expertIds");
  p.bind(p.args.expertWeights, ArgSource::Operand, 2, "expertWeights");
  Exl3GpuWeights *projections[] = {&p.args.gate, &p.args.up, &p.args.down};
  const char *names[] = {"gate", "up", "down"};
  for (size_t i = 0; i < 3; ++i) {
    packExl3Weights(p, *projections[i], step.weight(i).exl3Geometry, i, names[i]);
  }
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.bind(p.args.partial, ArgSource::Workspace, 0, "partial");
  p.set(p.args.tokens, rows, "tokens");
  p.set(p.args.hidden, m.hidden, "hidden");
  p.set(p.args.inter, m.inter, "inter");
  p.set(p.args.experts, m.experts, "experts");
  p.set(p.args.topK, m.topK, "topK");
  packFirstExpert(p, p.args.firstExpert, m);
  p.set(p.args.limit, m.limit, "limit");
  p.set(p.args.residentRows, kExl3MoeResidentRowsDefault, "residentRows");
  GpuStep gpu;
  for (const NamedLaunch &l :
       exl3MoeLaunches(m.exl3Bits, m.exl3Codebook, rows, m.hidden, m.inter, m.experts, m.topK)) {
    gpu.launches.push_back(p.launch("kernels/moe_experts/exl3_moe.cuh", l.name, l.dims));
  }
  gpu.workspaceBytes = static_cast<uint64_t>(exl3MoeScratchBytes(rows, m.topK, m.hidden, m.inter));
  return gpu;
}

GpuStep fusedPrefill(const OpStep &step, const MoeShape &m) {
  const int64_t rows = step.rows();
  const Exl3MoePrefillScratch s = exl3MoePrefillScratch(rows, m.topK, m.experts, m.hidden, m.inter);
  // One struct serves all six launches: the route and combine kernels read its leading
  // MoeExpertsGpuArgs.
  ArgPack<Exl3MoePrefillGpuArgs> p;
  packMoeCommon(p, p.args.moe, step, m, "moe.");
  p.bind(p.args.moe.contrib, ArgSource::Workspace, 0, "moe.contrib", static_cast<uint64_t>(s.z));
  p.bind(p.args.moe.counts, ArgSource::Workspace, 0, "moe.counts", static_cast<uint64_t>(s.counts));
  p.bind(p.args.moe.lists, ArgSource::Workspace, 0, "moe.lists", static_cast<uint64_t>(s.lists));
  packFirstExpert(p, p.args.moe.firstExpert, m);
  Exl3GpuWeights *projections[] = {&p.args.gate, &p.args.up, &p.args.down};
  const char *names[] = {"gate", "up", "down"};
  for (size_t i = 0; i < 3; ++i) {
    packExl3Weights(p, *projections[i], step.weight(i).exl3Geometry, i, names[i]);
  }
  p.bind(p.args.act, ArgSource::Workspace, 0, "act", static_cast<uint64_t>(s.act));
  p.bind(p.args.z, ArgSource::Workspace, 0, "z", static_cast<uint64_t>(s.z));
  GpuStep gpu;
  // The route and combine launches are moe_experts' kernels; the header includes both.
  for (const NamedLaunch &l : exl3MoePrefillLaunches(m.exl3Bits, m.exl3Codebook, rows, m.hidden,
                                                     m.inter, m.experts, m.topK)) {
    gpu.launches.push_back(p.launch("kernels/moe_experts/exl3_moe_prefill.cuh", l.name, l.dims));
  }
  gpu.workspaceBytes = static_cast<uint64_t>(s.bytes);
  return gpu;
}

GpuStep dense(const OpStep &step, const MoeShape &m) {
  const int64_t rows = step.rows();
  const int64_t activationBytes = step.activation() == DType::F32 ? 4 : 2;
  const MoeExpertsScratch s =
      moeExpertsScratch(m.path, rows, m.topK, m.experts, m.hidden, m.inter, activationBytes);
  const Exl3Staging staging = exl3StagingOf(step, static_cast<uint64_t>(s.bytes), /*routed=*/true);
  ArgPack<MoeExpertsGpuArgs> p;
  packMoeCommon(p, p.args, step, m, "");
  bindDenseWeight(p, p.args.gate, staging, 0, "gate");
  bindDenseWeight(p, p.args.up, staging, 1, "up");
  bindDenseWeight(p, p.args.down, staging, 2, "down");
  p.bind(p.args.act, ArgSource::Workspace, 0, "act", static_cast<uint64_t>(s.act));
  p.bind(p.args.contrib, ArgSource::Workspace, 0, "contrib", static_cast<uint64_t>(s.contrib));
  if (m.path != MoeExpertsPath::Decode) {
    p.bind(p.args.counts, ArgSource::Workspace, 0, "counts", static_cast<uint64_t>(s.counts));
    p.bind(p.args.lists, ArgSource::Workspace, 0, "lists", static_cast<uint64_t>(s.lists));
  }
  packFirstExpert(p, p.args.firstExpert, m);
  GpuStep gpu{exl3StagingLaunches(step, staging), staging.end};
  for (const NamedLaunch &l : moeExpertsLaunches(m.path, kernelTypeName(step.activation()),
                                                 kernelTypeName(step.denseWeightType(0)), rows,
                                                 m.hidden, m.inter, m.experts, m.topK)) {
    gpu.launches.push_back(p.launch("kernels/moe_experts/moe_experts.cuh", l.name, l.dims));
  }
  return gpu;
}

} // namespace

Expected<GpuStep> moeExpertsGpu(const OpStep &step) {
  const MoeShape m = shapeOf(step);
  switch (m.exl3) {
  case Exl3MoePath::FusedDecode:
    return fusedDecode(step, m);
  case Exl3MoePath::FusedPrefill:
    return fusedPrefill(step, m);
  case Exl3MoePath::Staged:
    break;
  }
  return dense(step, m);
}

Status moeExpertsCpu(const OpStep &step, const HostStep &host) {
  const MoeShape m = shapeOf(step);
  const int64_t n = host.rows();
  // Per-expert views into the stacked [E, I, H] / [E, H, I] weights.
  const WeightView gate = host.weight(0), up = host.weight(1), down = host.weight(2);
  const auto *ids = host.i32In(1);
  const float *routeWeights = host.f32In(2);
  // With experts split over ranks, this rank owns ids [rank E_local, (rank + 1) E_local):
  // selections of other ranks' experts contribute an exact zero here (weight 0) and are summed
  // by the all-reduce that follows.
  std::vector<int32_t> localIds;
  std::vector<float> localWeights;
  if (m.sharded) {
    const int64_t first = host.rank() * m.experts;
    localIds.resize(static_cast<size_t>(n * m.topK));
    localWeights.resize(localIds.size());
    for (size_t i = 0; i < localIds.size(); ++i) {
      const int64_t local = ids[i] - first;
      const bool mine = local >= 0 && local < m.experts;
      localIds[i] = mine ? static_cast<int32_t>(local) : 0;
      localWeights[i] = mine ? routeWeights[i] : 0.0f;
    }
    ids = localIds.data();
    routeWeights = localWeights.data();
  }
  const size_t matrix = static_cast<size_t>(m.inter * m.hidden) * dtypeSize(gate.dtype);
  std::vector<ExpertWeights> views(static_cast<size_t>(m.experts));
  for (int64_t e = 0; e < m.experts; ++e) {
    auto view = [&](const WeightView &stacked, int64_t rows, int64_t cols) {
      WeightView v;
      v.data = static_cast<const uint8_t *>(stacked.data) + static_cast<size_t>(e) * matrix;
      v.dtype = stacked.dtype;
      v.rank = 2;
      v.shape[0] = rows;
      v.shape[1] = cols;
      return v;
    };
    views[e] = {view(gate, m.inter, m.hidden), view(up, m.inter, m.hidden),
                view(down, m.hidden, m.inter)};
  }
  const MoeExpertsArgs moe{.x = host.f32In(0),
                           .expertIds = ids,
                           .expertWeights = routeWeights,
                           .experts = views.data(),
                           .out = host.f32Out(0),
                           .tokens = n,
                           .hidden = m.hidden,
                           .numExperts = m.experts,
                           .topK = m.topK,
                           .intermediate = m.inter,
                           .swigluLimit = m.limit};
  // EXL3 projections replace the dense views above (which then point at trellis bytes).
  std::vector<Exl3MatrixView> quantized[3];
  for (size_t i = 0; i < 3; ++i) {
    const WeightInfo w = step.weight(i);
    for (int64_t e = 0; w.exl3 && e < w.exl3Geometry.matrices; ++e) {
      quantized[i].push_back(exl3MatrixAt(host.weightBytes(i), w.exl3Geometry, e));
    }
  }
  if (quantized[0].empty() && quantized[1].empty() && quantized[2].empty()) {
    return moeExpertsRef(moe);
  }
  auto first = [](const std::vector<Exl3MatrixView> &v) { return v.empty() ? nullptr : v.data(); };
  return exl3MoeExpertsRef({.moe = moe,
                            .exl3Gate = first(quantized[0]),
                            .exl3Up = first(quantized[1]),
                            .exl3Down = first(quantized[2])});
}

Status moeExpertsCheck(const OpStep &step) {
  Contract c(step);
  c.counts(3, 1, 3, 3, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  const Shape ids = c.operand(1, DType::I32, 2);
  c.check(ids[0] == x[0], "operand 1 has ", ids[0], " rows, the input ", x[0]);
  c.operandIs(2, c.activation(), {x[0], ids[1]});
  c.resultAs(0, c.activation(), x);
  const Shape gate = c.weight(0, 3);
  const int64_t experts = gate[0], inter = gate[1];
  c.check(gate[2] == x[1], "weight 0 takes ", gate[2], " features, the input has ", x[1]);
  c.weightIs(1, {experts, inter, x[1]});
  c.weightIs(2, {experts, x[1], inter});
  for (size_t i = 0; c.ok() && i < 3; ++i) {
    const WeightInfo w = step.weight(i);
    if (w.exl3) {
      const Exl3Geometry &g = w.exl3Geometry;
      c.check(g.matrices == experts && g.out == w.shape[1] && g.in == w.shape[2], "EXL3 weight ", i,
              " (", w.name, ") is ", g.matrices, " matrices of [", g.out, ", ", g.in,
              "], its op reads ", experts, " of [", w.shape[1], ", ", w.shape[2], "]");
    }
  }
  c.intParam("expert_shards", 1, 1, 1 << 16);
  c.floatParam("limit", INFINITY, 0, INFINITY);
  return c.status();
}

} // namespace glm::kernels
