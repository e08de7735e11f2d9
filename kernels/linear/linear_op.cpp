// linear's plan adapter: operand 0 x [rows, in], weight 0 W [out, in] (dense, or EXL3 read through
// its bf16 reconstruction), optional weight 1 the bias [out], result 0 y [rows, out]. Optional
// operand 1, an addend [rows, out]: the add that read y, folded in (plan-fuse-linear-add; never
// the model), added to the rounded y as the add step did (the add's reference on the CPU).
#include "kernels/linear/linear_op.h"

#include "kernels/add/add.h"
#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/exl3/exl3.h"
#include "kernels/exl3/exl3_staging.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_gpu.h"

namespace glm::kernels {
namespace {

/// Whether the step holds a folded add's other operand.
bool hasAddend(const OpStep &step) { return step.operandCount() == 2; }

/// y += addend, after the reference linear wrote y.
Status addAddend(const OpStep &step, const HostStep &host) {
  if (!hasAddend(step)) {
    return Status::success();
  }
  return addRef({.a = host.f32Out(0),
                 .b = host.f32In(1),
                 .out = host.f32Out(0),
                 .count = host.rows() * step.resultDim(0, 1)});
}

/// The reference linear into y (an EXL3 weight through its bf16 reconstruction).
Status linearRefOf(const OpStep &step, const HostStep &host) {
  const int64_t in = step.operandDim(0, 1), out = step.resultDim(0, 1);
  const WeightInfo w = step.weight(0);
  if (w.exl3) {
    const Exl3MatrixView quantized = exl3MatrixAt(host.weightBytes(0), w.exl3Geometry, 0);
    if (quantized.in != in || quantized.out != out) {
      return invalidArgument("EXL3 weight [", quantized.out, ", ", quantized.in, "] does not map ",
                             in, " to ", out, " features");
    }
    return exl3DenseLinearRef(host.f32In(0), quantized, host.weight(1), host.f32Out(0),
                              host.rows());
  }
  return linearRef({.x = host.f32In(0),
                    .weight = host.weight(0),
                    .bias = host.weight(1),
                    .y = host.f32Out(0),
                    .rows = host.rows(),
                    .inFeatures = in,
                    .outFeatures = out});
}

} // namespace

Expected<GpuStep> linearGpu(const OpStep &step) {
  const int64_t rows = step.rows(), in = step.operandDim(0, 1), out = step.resultDim(0, 1);
  const TargetInfo target = step.target();
  const WeightInfo w = step.weight(0);
  const DenseEncoding encoding = w.denseEncoding();
  if (encoding == DenseEncoding::Q4 && in % kQ4Group != 0) {
    return step.error(StatusCode::InvalidArgument, "Q4 weights need in features (", in,
                      ") a multiple of ", kQ4Group);
  }
  const bool quantized = encoding != DenseEncoding::Plain;
  const bool bf16 = step.activation() == DType::BF16;
  // Chosen for choiceRows: a decode program's rows all run the kernel and K split one row gets.
  const int64_t choice = step.choiceRows();
  const LinearKernel kernel = quantized
                                  ? linearQuantKernelFor(bf16, choice, out, target.smCount)
                                  : linearKernelFor(bf16 && step.denseWeightType(0) == DType::BF16,
                                                    choice, out, target.name, target.smCount);
  const Exl3Staging staging = exl3StagingOf(step, 0, /*routed=*/false);

  ArgPack<LinearGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  bindDenseWeight(p, p.args.weight, staging, 0, "weight");
  // The sections after the codes, addressed from the weight's slice (one matrix [out, in]) so
  // that the plan shows where each points and the kernels need no layout arithmetic of their own.
  if (encoding == DenseEncoding::Fp8) {
    p.bind(p.args.weightScaleInv, ArgSource::Weight, 0, "weightScaleInv",
           static_cast<uint64_t>(fp8ScalesOffset(1, out, in)));
  } else if (encoding == DenseEncoding::Q4) {
    p.bind(p.args.weightGroups, ArgSource::Weight, 0, "weightGroups",
           static_cast<uint64_t>(q4GroupsOffset(1, out, in)));
  }
  if (step.hasWeight(1)) {
    p.bind(p.args.bias, ArgSource::Weight, 1, "bias");
  }
  p.bind(p.args.y, ArgSource::Result, 0, "y");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.inFeatures, in, "inFeatures");
  p.set(p.args.outFeatures, out, "outFeatures");
  p.set(p.args.biasBf16, step.hasWeight(1) && step.weight(1).element == DType::BF16 ? 1 : 0,
        "biasBf16");
  if (hasAddend(step)) {
    p.bind(p.args.addend, ArgSource::Operand, 1, "addend");
  }
  const std::string weightType = encoding == DenseEncoding::Q4 ? "glm::kernels::Q4Groups"
                                 : encoding == DenseEncoding::Fp8
                                     ? "glm::kernels::Fp8E4m3"
                                     : kernelTypeName(step.denseWeightType(0));
  GpuStep gpu{exl3StagingLaunches(step, staging), staging.end};
  gpu.launches.push_back(
      p.launch("kernels/linear/linear.cuh",
               linearKernelName(kernel, kernelTypeName(step.activation()), weightType),
               linearLaunch(kernel, rows, in, out, target.smCount,
                            {encoding == DenseEncoding::Q4, target.sharedMemoryPerBlock})));
  return gpu;
}

Status linearCpu(const OpStep &step, const HostStep &host) {
  GLM_RETURN_IF_ERROR(linearRefOf(step, host));
  return addAddend(step, host);
}

Status linearCheck(const OpStep &step) {
  Contract c(step);
  c.counts(hasAddend(step) ? 2 : 1, 1, 1, 2, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  const Shape w = c.weight(0, 2);
  c.check(w[1] == x[1], "weight 0 (", c.ok() ? step.weight(0).name : "", ") takes ", w[1],
          " features, the input has ", x[1]);
  c.resultIs(0, c.activation(), {x[0], w[0]});
  if (hasAddend(step)) {
    c.operandIs(1, c.activation(), {x[0], w[0]});
  }
  if (c.ok() && step.weight(0).exl3) {
    const Exl3Geometry g = step.weight(0).exl3Geometry;
    c.check(g.matrices == 1 && g.in == x[1] && g.out == w[0], "EXL3 weight 0 is ", g.matrices,
            " matrices of [", g.out, ", ", g.in, "], its op reads one [", w[0], ", ", x[1], "]");
  }
  c.weightDense(1);
  c.weightHolds(1, w[0]);
  return c.status();
}

} // namespace glm::kernels
