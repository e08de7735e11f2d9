// short_conv's plan adapter: P parts (1 to kShortConvMaxParts, one per result), each a conv of
// its own: operand p x_p [rows, channels_p], the step context after them (positions, sequence
// slots), weight p its kernel [channels_p, 1, K] (one K for all), state p each sequence's window
// of its last K - 1 inputs, result p; SiLU after the conv (KDA's q/k/v convolutions, which
// plan-group-short-convs puts in one step).
#include "kernels/short_conv/short_conv_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/short_conv/short_conv.h"
#include "kernels/short_conv/short_conv_gpu.h"

#include <string>

namespace glm::kernels {
namespace {

int64_t kernelSizeOf(const OpStep &step, size_t part) {
  const WeightInfo w = step.weight(part);
  return w.shape[w.shape.rank - 1];
}

} // namespace

Expected<GpuStep> shortConvGpu(const OpStep &step) {
  const size_t parts = step.resultCount();
  ArgPack<ShortConvGpuArgs> p;
  int64_t blockEnd = 0;
  for (size_t i = 0; i < parts; ++i) {
    ShortConvPart &part = p.args.part[i];
    const std::string at = "part[" + std::to_string(i) + "].";
    const int64_t channels = step.operandDim(i, 1);
    blockEnd = shortConvPartEnd(blockEnd, channels);
    p.bind(part.x, ArgSource::Operand, i, (at + "x").c_str());
    p.bind(part.weight, ArgSource::Weight, i, (at + "weight").c_str());
    p.bind(part.out, ArgSource::Result, i, (at + "out").c_str());
    packSlotState(p, part.state, step, i, at + "state");
    p.set(part.channels, channels, (at + "channels").c_str());
    p.set(part.blockEnd, blockEnd, (at + "blockEnd").c_str());
  }
  p.set(p.args.parts, parts, "parts");
  packStepContext(p, p.args.ctx, step, parts, /*paged=*/false);
  p.set(p.args.kernelSize, kernelSizeOf(step, 0), "kernelSize");
  p.set(p.args.silu, 1, "silu");
  return GpuStep{
      {p.launch("kernels/short_conv/short_conv.cuh",
                kernelInstance("shortConvKernel", {kernelTypeName(step.activation()),
                                                   kernelTypeName(step.denseWeightType(0))}),
                shortConvLaunch(p.args, step.batch()))}};
}

Status shortConvCpu(const OpStep &step, const HostStep &host) {
  for (size_t i = 0; i < step.resultCount(); ++i) {
    const int64_t channels = step.operandDim(i, 1);
    const WeightView w = host.weight(i);
    for (const HostRowGroup &g : host.groups()) {
      GLM_RETURN_IF_ERROR(
          shortConvRef({.x = host.f32In(i) + g.first * channels,
                        .weight = w,
                        .state = reinterpret_cast<float *>(stateSlot(step, host, i, g.slot)),
                        .out = host.f32Out(i) + g.first * channels,
                        .tokens = g.count,
                        .channels = channels,
                        .kernelSize = kernelSizeOf(step, i)}));
    }
  }
  return Status::success();
}

Status shortConvCheck(const OpStep &step) {
  Contract c(step);
  const size_t parts = step.resultCount();
  c.check(parts >= 1 && parts <= static_cast<size_t>(kShortConvMaxParts), "has ", parts,
          " results, its op writes 1 to ", kShortConvMaxParts);
  c.counts(parts + 2, parts, parts, parts, parts);
  c.stepContext(parts, /*paged=*/false);
  const int64_t kernel = c.ok() ? kernelSizeOf(step, 0) : 0;
  for (size_t i = 0; c.ok() && i < parts; ++i) {
    const Shape x = c.operand(i, c.activation(), 2);
    c.resultAs(i, c.activation(), x);
    c.weightDense(i);
    const Shape w = c.ok() ? step.weight(i).shape : Shape{};
    c.check(w.rank >= 2 && w.rank <= 3 && w[0] == x[1] && w.numel() == x[1] * w[w.rank - 1] &&
                w[w.rank - 1] >= 1,
            "weight ", i, " is ", Contract::shapeText(w), ", its op reads [", x[1], ", 1, kernel]");
    c.check(w[w.rank - 1] == kernel, "weight ", i, "'s kernel is ", w[w.rank - 1], ", weight 0's ",
            kernel, ": a step's parts share one window");
    c.check(step.denseWeightType(i) == step.denseWeightType(0), "weight ", i,
            " is not stored as weight 0 is: a step's parts share one kernel instance");
    c.stateHolds(i, DType::F32, x[1] * (kernel - 1));
  }
  c.check(step.target().name == "cpu" || kernel <= kShortConvMaxKernel, "kernel ", kernel,
          " is wider than the ", kShortConvMaxKernel, " taps the GPU kernel holds");
  return c.status();
}

} // namespace glm::kernels
