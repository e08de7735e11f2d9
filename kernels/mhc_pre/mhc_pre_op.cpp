// mhc_pre's plan adapter: operand 0 the streams [rows, streams, hidden], weights fn, base and
// scale (one dtype), results x [rows, hidden], post [rows, streams] and comb [rows, streams,
// streams] (both f32); parameters sinkhorn_iters, norm_eps, hc_eps.
//
// Folded with the mhc_post that writes its streams (plan-fuse-mhc makes it; never the model):
// mhc_post's four operands in its order (y, post, comb, residual) instead of the streams, and its
// result, the new streams, as result 3. Decode rows run mhcPostPreDecodeKernel; prefill rows
// mhc_post's kernel, then the prefill mixer on its result; the CPU the two references in turn.
//
// Folded with the RMSNorm that reads x (plan-fuse-mhc-norm), folded with mhc_post or not: the
// norm's weight as weight 3, its eps as parameter input_norm_eps, and its result, rms_norm(x), as
// the last result. Decode rows run the *NormDecodeKernel twin of the decode kernel, prefill rows
// rmsNormKernel after the mixer, the CPU the norm's reference after the mixer's.
#include "kernels/mhc_pre/mhc_pre_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/mhc_post/mhc_post_op.h"
#include "kernels/mhc_pre/mhc_pre.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"
#include "kernels/rms_norm/rms_norm_op.h"

#include <string>

namespace glm::kernels {
namespace {

struct MhcPreParams {
  int64_t sinkhornIters = 20;
  float normEps = 1e-5f, hcEps = 1e-6f, inputNormEps = 1e-5f;
};

MhcPreParams paramsOf(const OpStep &step) {
  return {step.intParam("sinkhorn_iters", 20), step.floatParam("norm_eps", 1e-5f),
          step.floatParam("hc_eps", 1e-6f), step.floatParam("input_norm_eps", 1e-5f)};
}

/// Whether the step is folded with its mhc_post (four operands; the contract checks the rest).
bool folded(const OpStep &step) { return step.operandCount() == 4; }
/// Folded: the result that holds the new streams, which the mixer reads.
constexpr size_t kFoldedStreams = 3;
/// Whether the step is folded with the RMSNorm of x (its weight is weight 3).
bool normFolded(const OpStep &step) { return step.weightCount() == 4; }
constexpr size_t kInputNormWeight = 3;
/// The folded norm's result: the last one.
size_t normedResult(const OpStep &step) { return folded(step) ? 4 : 3; }
/// The streams [rows, hc, hidden] the mixer reads: operand 0, or the folded mhc_post's result.
Shape streamsOf(const OpStep &step) {
  return folded(step) ? step.result(kFoldedStreams).shape : step.operand(0).shape;
}

} // namespace

Expected<GpuStep> mhcPreGpu(const OpStep &step) {
  // The kernels read fn, base and scale as one type.
  for (size_t i = 1; i < 3; ++i) { // the folded norm's weight may be of its own type
    if (step.weight(i).element != step.weight(0).element) {
      return step.error(StatusCode::InvalidArgument, "mHC weights of different dtypes");
    }
  }
  const MhcPreParams params = paramsOf(step);
  const int64_t rows = step.rows();
  const bool fold = folded(step), norm = normFolded(step);
  // For choiceRows: the two kernels reduce a token's dots in different orders.
  const bool prefill = mhcPreUsesPrefill(step.choiceRows());
  ArgPack<MhcPreGpuArgs> p;
  if (!fold) {
    p.bind(p.args.streams, ArgSource::Operand, 0, "streams");
  } else if (prefill) {
    p.bind(p.args.streams, ArgSource::Result, kFoldedStreams, "streams");
  } else {
    p.bind(p.args.y, ArgSource::Operand, 0, "y");
    p.bind(p.args.lastPost, ArgSource::Operand, 1, "lastPost");
    p.bind(p.args.lastComb, ArgSource::Operand, 2, "lastComb");
    p.bind(p.args.residual, ArgSource::Operand, 3, "residual");
    p.bind(p.args.newStreams, ArgSource::Result, kFoldedStreams, "newStreams");
  }
  p.bind(p.args.fn, ArgSource::Weight, 0, "fn");
  p.bind(p.args.base, ArgSource::Weight, 1, "base");
  p.bind(p.args.scale, ArgSource::Weight, 2, "scale");
  p.bind(p.args.post, ArgSource::Result, 1, "post");
  p.bind(p.args.comb, ArgSource::Result, 2, "comb");
  p.bind(p.args.x, ArgSource::Result, 0, "x");
  p.set(p.args.tokens, rows, "tokens");
  p.set(p.args.hidden, streamsOf(step)[2], "hidden");
  p.set(p.args.sinkhornIters, params.sinkhornIters, "sinkhornIters");
  p.set(p.args.normEps, params.normEps, "normEps");
  p.set(p.args.hcEps, params.hcEps, "hcEps");
  const bool normInKernel = norm && !prefill;
  if (normInKernel) {
    p.bind(p.args.inputNormWeight, ArgSource::Weight, kInputNormWeight, "inputNormWeight");
    p.bind(p.args.normed, ArgSource::Result, normedResult(step), "normed");
    p.set(p.args.inputNormEps, params.inputNormEps, "inputNormEps");
  }
  const char *kernel = prefill        ? "mhcPrePrefillKernel"
                       : fold && norm ? "mhcPostPreNormDecodeKernel"
                       : fold         ? "mhcPostPreDecodeKernel"
                       : norm         ? "mhcPreNormDecodeKernel"
                                      : "mhcPreDecodeKernel";
  const std::string act = kernelTypeName(step.activation()),
                    weights = kernelTypeName(step.denseWeightType(0)),
                    streams = std::to_string(streamsOf(step)[1]);
  const std::string instance =
      normInKernel
          ? kernelInstance(kernel, {act, weights, streams,
                                    kernelTypeName(step.denseWeightType(kInputNormWeight))})
          : kernelInstance(kernel, {act, weights, streams});
  GpuStep gpu;
  if (fold && prefill) {
    gpu.launches.push_back(mhcPostLaunchOf(step, kFoldedStreams));
  }
  gpu.launches.push_back(
      p.launch("kernels/mhc_pre/mhc_pre.cuh", instance, mhcPreLaunch(rows, prefill)));
  if (norm && prefill) {
    gpu.launches.push_back(
        rmsNormLaunchOf(step, 0, kInputNormWeight, normedResult(step), params.inputNormEps));
  }
  return gpu;
}

Status mhcPreCpu(const OpStep &step, const HostStep &host) {
  const MhcPreParams params = paramsOf(step);
  const bool fold = folded(step);
  if (fold) {
    GLM_RETURN_IF_ERROR(mhcPostCpuOf(step, host, kFoldedStreams));
  }
  const Shape streams = streamsOf(step);
  GLM_RETURN_IF_ERROR(mhcPreRef({.streams = fold ? host.f32Out(kFoldedStreams) : host.f32In(0),
                                 .fn = host.weight(0),
                                 .base = host.weight(1),
                                 .scale = host.weight(2),
                                 .post = host.f32Out(1),
                                 .comb = host.f32Out(2),
                                 .x = host.f32Out(0),
                                 .tokens = host.rows(),
                                 .hcMult = streams[1],
                                 .hidden = streams[2],
                                 .sinkhornIters = params.sinkhornIters,
                                 .normEps = params.normEps,
                                 .hcEps = params.hcEps}));
  if (normFolded(step)) {
    return rmsNormCpuOf(step, host, 0, kInputNormWeight, normedResult(step), params.inputNormEps);
  }
  return Status::success();
}

Status mhcPreCheck(const OpStep &step) {
  Contract c(step);
  const bool fold = folded(step), norm = normFolded(step);
  c.counts(fold ? 4 : 1, (fold ? 4 : 3) + (norm ? 1 : 0), 3, 4, 0);
  const Shape streams = fold ? mhcPostContract(c, kFoldedStreams) : c.operand(0, c.activation(), 3);
  const int64_t rows = streams[0], s = streams[1], hidden = streams[2];
  for (size_t i = 0; i < 3; ++i) {
    c.weightDense(i);
  }
  c.weightIs(0, {(2 + s) * s, s * hidden});
  c.weightHolds(1, (2 + s) * s);
  c.weightHolds(2, 3);
  c.resultIs(0, c.activation(), {rows, hidden});
  c.resultIs(1, DType::F32, {rows, s});
  c.resultIs(2, DType::F32, {rows, s, s});
  c.intParam("sinkhorn_iters", 20, 1, kMhcMaxSinkhornIters);
  c.floatParam("norm_eps", 1e-5, 0, 1);
  c.floatParam("hc_eps", 1e-6, 0, 1);
  if (norm) {
    c.weightDense(kInputNormWeight);
    c.weightHolds(kInputNormWeight, hidden);
    c.resultIs(normedResult(step), c.activation(), {rows, hidden});
    c.floatParam("input_norm_eps", 1e-5, 0, 1);
  }
  return c.status();
}

} // namespace glm::kernels
