// linear_group's plan adapter (contract in linear_group_op.h).
#include "kernels/linear_group/linear_group_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/linear/linear.h"
#include "kernels/linear_group/linear_group_gpu.h"

#include <string>

namespace glm::kernels {

bool linearJoinsGroup(const OpStep &linear) {
  if (linear.weightCount() != 1 || linear.operandCount() != 1 || linear.resultCount() != 1 ||
      !linear.decodeProgram() || linear.weight(0).exl3) {
    return false;
  }
  // The CPU runs each part with linear's reference, so grouping costs nothing there, and it gives
  // a CPU plan the GPU plan's steps (its convs then group too): the group's adapters run in every
  // CPU test.
  if (linear.target().name == "cpu") {
    return true;
  }
  const DenseEncoding encoding = linear.weight(0).denseEncoding();
  if (linear.activation() != DType::BF16 || linear.operand(0).element != DType::BF16 ||
      (encoding != DenseEncoding::Q4 && encoding != DenseEncoding::Fp8)) {
    return false;
  }
  // Where linearGpu's own rule takes a decode-quant kernel (plain or split), not the prefill one.
  return linearQuantKernelFor(true, linear.choiceRows(), linear.resultDim(0, 1),
                              linear.target().smCount) != LinearKernel::PrefillMma;
}

Expected<GpuStep> linearGroupGpu(const OpStep &step) {
  const int64_t rows = step.rows(), in = step.operandDim(0, 1);
  const DenseEncoding encoding = step.weight(0).denseEncoding();
  if (step.activation() != DType::BF16 ||
      (encoding != DenseEncoding::Q4 && encoding != DenseEncoding::Fp8)) {
    return step.error(StatusCode::Unimplemented,
                      "linear_group runs bf16 activations with Q4 or fp8 weights only");
  }
  const bool q4 = encoding == DenseEncoding::Q4;
  ArgPack<LinearGroupGpuArgs> p;
  p.set(p.args.rows, rows, "rows");
  p.set(p.args.inFeatures, in, "inFeatures");
  const size_t parts = step.resultCount();
  const bool ownInputs = step.operandCount() > 1;
  p.set(p.args.parts, parts, "parts");
  int64_t blocks = 0;
  for (size_t i = 0; i < parts; ++i) {
    LinearGroupPart &part = p.args.part[i];
    const std::string at = "part[" + std::to_string(i) + "].";
    const int64_t out = step.resultDim(i, 1);
    blocks += linearGroupPartBlocks(rows, out);
    p.bind(part.x, ArgSource::Operand, ownInputs ? i : 0, (at + "x").c_str());
    p.bind(part.weight, ArgSource::Weight, i, (at + "weight").c_str());
    // The sections after the codes, addressed from each weight's slice as linear's are.
    if (q4) {
      p.bind(part.weightGroups, ArgSource::Weight, i, (at + "weightGroups").c_str(),
             static_cast<uint64_t>(q4GroupsOffset(1, out, in)));
    } else {
      p.bind(part.weightScaleInv, ArgSource::Weight, i, (at + "weightScaleInv").c_str(),
             static_cast<uint64_t>(fp8ScalesOffset(1, out, in)));
    }
    p.bind(part.y, ArgSource::Result, i, (at + "y").c_str());
    p.set(part.outFeatures, out, (at + "outFeatures").c_str());
    p.set(part.blockEnd, blocks, (at + "blockEnd").c_str());
  }
  const TargetInfo target = step.target();
  const std::string weightType = q4 ? "glm::kernels::Q4Groups" : "glm::kernels::Fp8E4m3";
  GpuStep gpu;
  gpu.launches.push_back(p.launch(
      "kernels/linear_group/linear_group.cuh",
      "glm::kernels::linearGroupDecodeQuantKernel<glm::kernels::Bf16, " + weightType + ">",
      linearGroupLaunch(rows, in, blocks, target.smCount, {q4, target.sharedMemoryPerBlock})));
  return gpu;
}

Status linearGroupCpu(const OpStep &step, const HostStep &host) {
  const int64_t in = step.operandDim(0, 1);
  const bool ownInputs = step.operandCount() > 1;
  for (size_t i = 0; i < step.resultCount(); ++i) {
    GLM_RETURN_IF_ERROR(linearRef({.x = host.f32In(ownInputs ? i : 0),
                                   .weight = host.weight(i),
                                   .bias = {},
                                   .y = host.f32Out(i),
                                   .rows = host.rows(),
                                   .inFeatures = in,
                                   .outFeatures = step.resultDim(i, 1)}));
  }
  return Status::success();
}

Status linearGroupCheck(const OpStep &step) {
  Contract c(step);
  const size_t parts = step.resultCount();
  c.check(parts >= 2 && parts <= static_cast<size_t>(kLinearGroupMaxParts), "has ", parts,
          " results, its op writes 2 to ", kLinearGroupMaxParts);
  const size_t inputs = step.operandCount() == parts ? parts : 1;
  c.counts(inputs, parts, parts, parts, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  for (size_t i = 1; c.ok() && i < inputs; ++i) {
    const Shape xi = c.operand(i, c.activation(), 2);
    c.check(xi[0] == x[0] && xi[1] == x[1], "operand ", i, " is ", Contract::shapeText(xi),
            ", operand 0 ", Contract::shapeText(x), ": a group's parts read one width and rows");
  }
  const DenseEncoding encoding = c.ok() ? step.weight(0).denseEncoding() : DenseEncoding::Plain;
  for (size_t i = 0; c.ok() && i < parts; ++i) {
    c.weightDense(i);
    const Shape w = c.weight(i, 2);
    const WeightInfo info = step.weight(i);
    c.check(w[1] == x[1], "weight ", i, " (", info.name, ") takes ", w[1],
            " features, the input has ", x[1]);
    c.check(info.denseEncoding() == encoding, "weight ", i, " (", info.name,
            ") is not in weight 0's encoding: a group's parts share one kernel");
    c.check(encoding != DenseEncoding::Q4 || x[1] % kQ4Group == 0, "Q4 weights need in features (",
            x[1], ") a multiple of ", kQ4Group);
    const Shape y = c.result(i, c.activation(), 2);
    c.check(y[0] == x[0] && y[1] == w[0], "result ", i, " is ", Contract::shapeText(y),
            ", its op writes [", x[0], ", ", w[0], "]");
  }
  return c.status();
}

} // namespace glm::kernels
