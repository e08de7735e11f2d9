// linear's plan adapter: operand 0 x [rows, in], weight 0 W [out, in] (dense, or EXL3 read through
// its bf16 reconstruction), optional weight 1 the bias [out], result 0 y [rows, out].
#include "kernels/linear/linear_op.h"

#include "kernels/common/StepArgs.h"
#include "kernels/exl3/exl3.h"
#include "kernels/exl3/exl3_staging.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_gpu.h"

namespace glm::kernels {

Expected<GpuStep> linearGpu(const OpStep &step) {
  if (step.weight(0).element == DType::F8_E4M3) {
    return step.error(StatusCode::Unimplemented,
                      "fp8 weights on the GPU need their block scales bound into the plan, which "
                      "the compiler does not do yet");
  }
  const int64_t rows = step.rows(), in = step.operandDim(0, 1), out = step.resultDim(0, 1);
  const TargetInfo target = step.target();
  const bool mma = step.activation() == DType::BF16 && step.denseWeightType(0) == DType::BF16;
  const LinearKernel kernel = linearKernelFor(mma, rows, out, target.name, target.smCount);
  const Exl3Staging staging = exl3StagingOf(step, 0, /*routed=*/false);

  ArgPack<LinearGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  bindDenseWeight(p, p.args.weight, staging, 0, "weight");
  if (step.hasWeight(1)) {
    p.bind(p.args.bias, ArgSource::Weight, 1, "bias");
  }
  p.bind(p.args.y, ArgSource::Result, 0, "y");
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.inFeatures, in, "inFeatures");
  p.set(p.args.outFeatures, out, "outFeatures");
  p.set(p.args.biasBf16, step.hasWeight(1) && step.weight(1).element == DType::BF16 ? 1 : 0,
        "biasBf16");
  GpuStep gpu{exl3StagingLaunches(step, staging), staging.end};
  gpu.launches.push_back(p.launch("kernels/linear/linear.cuh",
                                  linearKernelName(kernel, kernelTypeName(step.activation()),
                                                   kernelTypeName(step.denseWeightType(0))),
                                  linearLaunch(kernel, rows, in, out, target.smCount)));
  return gpu;
}

Status linearCpu(const OpStep &step, const HostStep &host) {
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

} // namespace glm::kernels
