// layer_norm's plan adapter: operand 0 x [rows, dim], weights 0 and 1 (weight, bias; optional),
// result 0; parameter eps.
#include "kernels/layer_norm/layer_norm_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/layer_norm/layer_norm_gpu.h"

namespace glm::kernels {

Expected<GpuStep> layerNormGpu(const OpStep &step) {
  ArgPack<LayerNormGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  if (step.hasWeight(0)) {
    p.bind(p.args.weight, ArgSource::Weight, 0, "weight");
  }
  if (step.hasWeight(1)) {
    p.bind(p.args.bias, ArgSource::Weight, 1, "bias");
  }
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.rows, step.rows(), "rows");
  p.set(p.args.dim, step.operandDim(0, 1), "dim");
  p.set(p.args.eps, step.floatParam("eps", 1e-5f), "eps");
  return GpuStep{
      {p.launch("kernels/layer_norm/layer_norm.cuh",
                kernelInstance("layerNormKernel", {kernelTypeName(step.activation()),
                                                   kernelTypeName(step.denseWeightType(0))}),
                layerNormLaunch(step.rows()))}};
}

Status layerNormCpu(const OpStep &step, const HostStep &host) {
  return layerNormRef({.x = host.f32In(0),
                       .weight = host.weight(0),
                       .bias = host.weight(1),
                       .out = host.f32Out(0),
                       .rows = host.rows(),
                       .dim = step.operandDim(0, 1),
                       .eps = step.floatParam("eps", 1e-5f)});
}

Status layerNormCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 1, 0, 2, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  c.resultAs(0, c.activation(), x);
  for (size_t i = 0; i < 2; ++i) {
    c.weightDense(i);
    c.weightHolds(i, x[1]);
  }
  c.floatParam("eps", 1e-5, 0, 1);
  return c.status();
}

} // namespace glm::kernels
