// short_conv's plan adapter: operand 0 x [rows, channels] with the step context after it
// (positions, sequence slots), weight 0 the kernel [channels, 1, K], state 0 each sequence's window
// of the last K - 1 inputs, result 0; SiLU after the conv (KDA's q/k/v convolutions).
#include "kernels/short_conv/short_conv_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/short_conv/short_conv.h"
#include "kernels/short_conv/short_conv_gpu.h"

namespace glm::kernels {
namespace {

int64_t kernelSizeOf(const OpStep &step) {
  const WeightInfo w = step.weight(0);
  return w.shape[w.shape.rank - 1];
}

} // namespace

Expected<GpuStep> shortConvGpu(const OpStep &step) {
  const int64_t channels = step.operandDim(0, 1);
  ArgPack<ShortConvGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  p.bind(p.args.weight, ArgSource::Weight, 0, "weight");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  packSlotState(p, p.args.state, step, 0, "state");
  packStepContext(p, p.args.ctx, step, 1, /*paged=*/false);
  p.set(p.args.channels, channels, "channels");
  p.set(p.args.kernelSize, kernelSizeOf(step), "kernelSize");
  p.set(p.args.silu, 1, "silu");
  return GpuStep{
      {p.launch("kernels/short_conv/short_conv.cuh",
                kernelInstance("shortConvKernel", {kernelTypeName(step.activation()),
                                                   kernelTypeName(step.denseWeightType(0))}),
                shortConvLaunch(channels, step.rowsPerSequence(), step.batch()))}};
}

Status shortConvCpu(const OpStep &step, const HostStep &host) {
  const int64_t channels = step.operandDim(0, 1);
  const WeightView w = host.weight(0);
  for (const HostRowGroup &g : host.groups()) {
    GLM_RETURN_IF_ERROR(
        shortConvRef({.x = host.f32In(0) + g.first * channels,
                      .weight = w,
                      .state = reinterpret_cast<float *>(stateSlot(step, host, 0, g.slot)),
                      .out = host.f32Out(0) + g.first * channels,
                      .tokens = g.count,
                      .channels = channels,
                      .kernelSize = kernelSizeOf(step)}));
  }
  return Status::success();
}

Status shortConvCheck(const OpStep &step) {
  Contract c(step);
  c.counts(3, 1, 1, 1, 1);
  const Shape x = c.operand(0, c.activation(), 2);
  c.stepContext(1, /*paged=*/false);
  c.resultAs(0, c.activation(), x);
  c.weightDense(0);
  const Shape w = c.ok() ? step.weight(0).shape : Shape{};
  c.check(w.rank >= 2 && w.rank <= 3 && w[0] == x[1] && w.numel() == x[1] * w[w.rank - 1] &&
              w[w.rank - 1] >= 1,
          "weight 0 is ", Contract::shapeText(w), ", its op reads [", x[1], ", 1, kernel]");
  c.stateHolds(0, DType::F32, x[1] * (c.ok() ? kernelSizeOf(step) - 1 : 0));
  return c.status();
}

} // namespace glm::kernels
