// mhc_pre's plan adapter: operand 0 the streams [rows, streams, hidden], weights fn, base and
// scale (one dtype), results x [rows, hidden], post [rows, streams] and comb [rows, streams,
// streams] (both f32); parameters sinkhorn_iters, norm_eps, hc_eps.
#include "kernels/mhc_pre/mhc_pre_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/mhc_pre/mhc_pre.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"

namespace glm::kernels {
namespace {

struct MhcPreParams {
  int64_t sinkhornIters = 20;
  float normEps = 1e-5f, hcEps = 1e-6f;
};

MhcPreParams paramsOf(const OpStep &step) {
  return {step.intParam("sinkhorn_iters", 20), step.floatParam("norm_eps", 1e-5f),
          step.floatParam("hc_eps", 1e-6f)};
}

} // namespace

Expected<GpuStep> mhcPreGpu(const OpStep &step) {
  // The kernels read fn, base and scale as one type.
  for (size_t i = 1; i < 3; ++i) {
    if (step.weight(i).element != step.weight(0).element) {
      return step.error(StatusCode::InvalidArgument, "mHC weights of different dtypes");
    }
  }
  const MhcPreParams params = paramsOf(step);
  const int64_t rows = step.rows();
  ArgPack<MhcPreGpuArgs> p;
  p.bind(p.args.streams, ArgSource::Operand, 0, "streams");
  p.bind(p.args.fn, ArgSource::Weight, 0, "fn");
  p.bind(p.args.base, ArgSource::Weight, 1, "base");
  p.bind(p.args.scale, ArgSource::Weight, 2, "scale");
  p.bind(p.args.post, ArgSource::Result, 1, "post");
  p.bind(p.args.comb, ArgSource::Result, 2, "comb");
  p.bind(p.args.x, ArgSource::Result, 0, "x");
  p.set(p.args.tokens, rows, "tokens");
  p.set(p.args.hidden, step.operandDim(0, 2), "hidden");
  p.set(p.args.sinkhornIters, params.sinkhornIters, "sinkhornIters");
  p.set(p.args.normEps, params.normEps, "normEps");
  p.set(p.args.hcEps, params.hcEps, "hcEps");
  // For choiceRows: the two kernels reduce a token's dots in different orders.
  const bool prefill = mhcPreUsesPrefill(step.choiceRows());
  return GpuStep{{p.launch(
      "kernels/mhc_pre/mhc_pre.cuh",
      kernelInstance(prefill ? "mhcPrePrefillKernel" : "mhcPreDecodeKernel",
                     {kernelTypeName(step.activation()), kernelTypeName(step.denseWeightType(0)),
                      std::to_string(step.operandDim(0, 1))}),
      mhcPreLaunch(rows, prefill))}};
}

Status mhcPreCpu(const OpStep &step, const HostStep &host) {
  const MhcPreParams params = paramsOf(step);
  return mhcPreRef({.streams = host.f32In(0),
                    .fn = host.weight(0),
                    .base = host.weight(1),
                    .scale = host.weight(2),
                    .post = host.f32Out(1),
                    .comb = host.f32Out(2),
                    .x = host.f32Out(0),
                    .tokens = host.rows(),
                    .hcMult = step.operandDim(0, 1),
                    .hidden = step.operandDim(0, 2),
                    .sinkhornIters = params.sinkhornIters,
                    .normEps = params.normEps,
                    .hcEps = params.hcEps});
}

Status mhcPreCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 3, 3, 3, 0);
  const Shape streams = c.operand(0, c.activation(), 3);
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
  return c.status();
}

} // namespace glm::kernels
