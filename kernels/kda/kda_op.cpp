// kda's plan adapter: operands q, k, v, f [rows, heads · head_dim] and b [rows, heads] with the
// step context after them (positions, sequence slots), weights a_log and dt_bias, state 0 each
// sequence's recurrent state, result 0; parameters num_heads, head_dim, lower_bound.
//
// Folded with the gated output norm that reads its result (plan-fuse-kda-norm): the norm's gate
// as operand 7, its weight as weight 2, its eps as parameter norm_eps, its result, the norm of
// each head of result 0, as result 1. Decode rows run kdaDecodeNormKernel (kda_gpu.h), prefill
// rows gatedRmsNormKernel after the prefill kernel, the CPU the norm's reference after kda's.
#include "kernels/kda/kda_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/gated_rms_norm/gated_rms_norm_op.h"
#include "kernels/kda/kda.h"
#include "kernels/kda/kda_gpu.h"

namespace glm::kernels {
namespace {

struct KdaShape {
  int64_t heads = 0, dim = 0;
  float lowerBound = -5.0f;
};

KdaShape shapeOf(const OpStep &step) {
  return {step.intParam("num_heads", 0), step.intParam("head_dim", 0),
          step.floatParam("lower_bound", -5.0f)};
}

/// HF's l2norm epsilon, inside the square root of q's and k's norms.
constexpr float kL2Eps = 1e-6f;

/// Whether the step is folded with the gated norm of its result (its weight is weight 2).
bool normFolded(const OpStep &step) { return step.weightCount() == 3; }
constexpr size_t kNormGate = 7, kNormWeight = 2, kNormed = 1;
float normEpsOf(const OpStep &step) { return step.floatParam("norm_eps", 1e-5f); }

} // namespace

Expected<GpuStep> kdaGpu(const OpStep &step) {
  const KdaShape s = shapeOf(step);
  if (s.dim > kKdaMaxKeyDim) {
    return step.error(StatusCode::Unimplemented, "KDA head_dim ", s.dim, " exceeds the kernel's ",
                      kKdaMaxKeyDim);
  }
  ArgPack<KdaGpuArgs> p;
  p.bind(p.args.q, ArgSource::Operand, 0, "q");
  p.bind(p.args.k, ArgSource::Operand, 1, "k");
  p.bind(p.args.v, ArgSource::Operand, 2, "v");
  p.bind(p.args.f, ArgSource::Operand, 3, "f");
  p.bind(p.args.b, ArgSource::Operand, 4, "b");
  p.bind(p.args.aLog, ArgSource::Weight, 0, "aLog");
  p.bind(p.args.dtBias, ArgSource::Weight, 1, "dtBias");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  packSlotState(p, p.args.state, step, 0, "state");
  packStepContext(p, p.args.ctx, step, 5, /*paged=*/false);
  p.set(p.args.heads, s.heads, "heads");
  p.set(p.args.keyDim, s.dim, "keyDim");
  p.set(p.args.valueDim, s.dim, "valueDim");
  p.set(p.args.lowerBound, s.lowerBound, "lowerBound");
  p.set(p.args.l2Eps, kL2Eps, "l2Eps");
  const bool decode = kdaUsesDecodeKernel(step.rowsPerSequence());
  const bool norm = normFolded(step);
  const std::string act = kernelTypeName(step.activation()),
                    weights = kernelTypeName(step.denseWeightType(0));
  std::string instance =
      kernelInstance(decode ? "kdaDecodeKernel" : "kdaPrefillKernel", {act, weights});
  if (norm && decode) {
    p.bind(p.args.gate, ArgSource::Operand, kNormGate, "gate");
    p.bind(p.args.normWeight, ArgSource::Weight, kNormWeight, "normWeight");
    p.bind(p.args.normed, ArgSource::Result, kNormed, "normed");
    p.set(p.args.normEps, normEpsOf(step), "normEps");
    instance = kernelInstance("kdaDecodeNormKernel",
                              {act, weights, kernelTypeName(step.denseWeightType(kNormWeight)),
                               std::to_string(kdaNormCluster(s.dim))});
  }
  GpuStep gpu;
  gpu.launches.push_back(
      p.launch("kernels/kda/kda.cuh", instance, kdaLaunch(decode, s.heads, s.dim, step.batch())));
  if (norm && !decode) {
    gpu.launches.push_back(
        gatedNormLaunchOf(step, 0, kNormGate, kNormWeight, kNormed, s.dim, normEpsOf(step)));
  }
  return gpu;
}

Status kdaCpu(const OpStep &step, const HostStep &host) {
  const KdaShape s = shapeOf(step);
  const int64_t width = s.heads * s.dim;
  for (const HostRowGroup &g : host.groups()) {
    GLM_RETURN_IF_ERROR(
        kdaRef({.q = host.f32In(0) + g.first * width,
                .k = host.f32In(1) + g.first * width,
                .v = host.f32In(2) + g.first * width,
                .f = host.f32In(3) + g.first * width,
                .b = host.f32In(4) + g.first * s.heads,
                .aLog = host.weight(0),
                .dtBias = host.weight(1),
                .state = reinterpret_cast<float *>(stateSlot(step, host, 0, g.slot)),
                .out = host.f32Out(0) + g.first * width,
                .tokens = g.count,
                .heads = s.heads,
                .keyDim = s.dim,
                .valueDim = s.dim,
                .lowerBound = s.lowerBound,
                .l2Eps = kL2Eps}));
  }
  if (normFolded(step)) {
    return gatedNormCpuOf(step, host, 0, kNormGate, kNormWeight, kNormed, s.dim, normEpsOf(step));
  }
  return Status::success();
}

Status kdaCheck(const OpStep &step) {
  Contract c(step);
  const bool norm = normFolded(step);
  c.counts(norm ? 8 : 7, norm ? 2 : 1, 2, 3, 1);
  const int64_t heads = c.intParam("num_heads", 0, 1, 1 << 16);
  const int64_t dim = c.intParam("head_dim", 0, 1, 1 << 16);
  const int64_t rows = step.rows(), width = heads * dim;
  for (size_t i = 0; i < 4; ++i) {
    c.operandIs(i, c.activation(), {rows, width});
  }
  c.operandIs(4, c.activation(), {rows, heads});
  c.stepContext(5, /*paged=*/false);
  c.resultIs(0, c.activation(), {rows, width});
  c.weightDense(0);
  c.weightDense(1);
  c.weightHolds(0, heads);
  c.weightHolds(1, width);
  c.stateHolds(0, DType::F32, heads * dim * dim);
  c.floatParam("lower_bound", -5.0, -1e30, 0);
  if (norm) {
    c.operandIs(kNormGate, c.activation(), {rows, width});
    c.resultIs(kNormed, c.activation(), {rows, width});
    c.weightDense(kNormWeight);
    c.weightHolds(kNormWeight, dim);
    c.floatParam("norm_eps", 1e-5, 0, 1);
  }
  return c.status();
}

} // namespace glm::kernels
