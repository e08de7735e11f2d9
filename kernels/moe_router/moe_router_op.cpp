// moe_router's plan adapter: operand 0 x [rows, hidden], weight 0 the router [experts, hidden],
// optional weight 1 its correction bias [experts], results the expert ids i32 [rows, top_k] and
// their weights [rows, top_k]; parameters top_k, n_group, topk_group, norm_topk_prob, scaling.
#include "kernels/moe_router/moe_router_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/moe_router/moe_router.h"
#include "kernels/moe_router/moe_router_gpu.h"

namespace glm::kernels {
namespace {

struct RouterParams {
  int64_t topK = 0, nGroup = 1, topkGroup = 1;
  bool normTopkProb = true;
  float scaling = 1.0f;
};

RouterParams paramsOf(const OpStep &step) {
  return {step.intParam("top_k", 0), step.intParam("n_group", 1), step.intParam("topk_group", 1),
          step.intParam("norm_topk_prob", 1) != 0, step.floatParam("scaling", 1.0f)};
}

} // namespace

Expected<GpuStep> moeRouterGpu(const OpStep &step) {
  const RouterParams r = paramsOf(step);
  const int64_t rows = step.rows(), experts = step.weight(0).shape[0];
  ArgPack<MoeRouterGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  p.bind(p.args.weight, ArgSource::Weight, 0, "weight");
  const WeightInfo w = step.weight(0);
  if (w.encoding == DenseEncoding::Q4) {
    return step.error(StatusCode::Unimplemented, "the router's weight in Q4 groups (its kernels ",
                      "read f32, bf16 and fp8 blocks)");
  }
  if (w.element == DType::F8_E4M3) {
    p.bind(p.args.weightScaleInv, ArgSource::Weight, 0, "weightScaleInv",
           static_cast<uint64_t>(fp8ScalesOffset(1, experts, step.operandDim(0, 1))));
  }
  if (step.hasWeight(1)) {
    p.bind(p.args.correctionBias, ArgSource::Weight, 1, "correctionBias");
  }
  p.bind(p.args.scores, ArgSource::Workspace, 0, "scores");
  p.bind(p.args.expertIds, ArgSource::Result, 0, "expertIds");
  p.bind(p.args.expertWeights, ArgSource::Result, 1, "expertWeights");
  p.set(p.args.tokens, rows, "tokens");
  p.set(p.args.hidden, step.operandDim(0, 1), "hidden");
  p.set(p.args.experts, experts, "experts");
  p.set(p.args.topK, r.topK, "topK");
  p.set(p.args.nGroup, r.nGroup, "nGroup");
  p.set(p.args.topkGroup, r.topkGroup, "topkGroup");
  p.set(p.args.normTopkProb, r.normTopkProb ? 1 : 0, "normTopkProb");
  p.set(p.args.biasBf16, step.hasWeight(1) && step.weight(1).element == DType::BF16 ? 1 : 0,
        "biasBf16");
  p.set(p.args.scaling, r.scaling, "scaling");
  // Both kernels take the one struct: the scores kernel fills the scores in the workspace, the
  // select kernel picks from them.
  const int64_t hidden = step.operandDim(0, 1),
                activationBytes = static_cast<int64_t>(dtypeSize(step.activation()));
  const MoeRouterScores scores = moeRouterScoresKernelFor(rows, hidden, activationBytes);
  const char *header = "kernels/moe_router/moe_router.cuh";
  const std::string t = kernelTypeName(step.activation());
  GpuStep gpu;
  gpu.launches.push_back(
      p.launch(header, moeRouterScoresName(scores, t, kernelTypeName(step.denseWeightType(0))),
               moeRouterScoresLaunch(scores, rows, experts, hidden, activationBytes)));
  gpu.launches.push_back(
      p.launch(header, kernelInstance("moeRouterSelectKernel", {t}), moeRouterSelectLaunch(rows)));
  gpu.workspaceBytes = static_cast<uint64_t>(rows * experts) * sizeof(float);
  return gpu;
}

Status moeRouterCpu(const OpStep &step, const HostStep &host) {
  const RouterParams r = paramsOf(step);
  const WeightView w = host.weight(0);
  return moeRouterRef({.x = host.f32In(0),
                       .weight = w,
                       .correctionBias = host.weight(1),
                       .expertIds = host.i32Out(0),
                       .expertWeights = host.f32Out(1),
                       .tokens = host.rows(),
                       .hidden = step.operandDim(0, 1),
                       .experts = w.dim(0),
                       .topK = r.topK,
                       .nGroup = r.nGroup,
                       .topkGroup = r.topkGroup,
                       .normTopkProb = r.normTopkProb,
                       .routedScalingFactor = r.scaling,
                       .tieRule = host.tieRule()});
}

Status moeRouterCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 2, 1, 2, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  c.weightDense(0);
  c.weightIs(0, {c.ok() ? step.weight(0).shape[0] : 0, x[1]});
  const int64_t experts = c.ok() ? step.weight(0).shape[0] : 0;
  c.check(!c.ok() || experts > 0, "routes to no experts");
  c.weightDense(1);
  c.weightHolds(1, experts);
  const int64_t topK = c.intParam("top_k", 0, 1, std::max<int64_t>(experts, 1));
  c.resultIs(0, DType::I32, {x[0], topK});
  c.resultIs(1, c.activation(), {x[0], topK});
  const int64_t groups = c.intParam("n_group", 1, 1, std::max<int64_t>(experts, 1));
  c.check(!c.ok() || experts % groups == 0, "n_group ", groups, " does not divide ", experts,
          " experts");
  c.intParam("topk_group", 1, 1, groups);
  c.floatParam("scaling", 1.0, -1e30, 1e30);
  return c.status();
}

} // namespace glm::kernels
