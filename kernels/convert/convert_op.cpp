// convert's plan adapter: operand 0 bf16 [rows, width] widened into result 0, f32 (the logits a
// bf16 plan returns).
#include "kernels/convert/convert_op.h"

#include "kernels/common/OpContract.h"
#include "kernels/common/StepArgs.h"
#include "kernels/convert/convert.h"
#include "kernels/convert/convert_gpu.h"

#include <cstring>

namespace glm::kernels {

Expected<GpuStep> convertGpu(const OpStep &step) {
  const int64_t count = step.rows() * step.operandDim(0, 1);
  ArgPack<ConvertGpuArgs> p;
  p.bind(p.args.x, ArgSource::Operand, 0, "x");
  p.bind(p.args.out, ArgSource::Result, 0, "out");
  p.set(p.args.count, count, "count");
  return GpuStep{{p.launch("kernels/convert/convert.cuh", "glm::kernels::convertBf16ToF32Kernel",
                           convertLaunch(count))}};
}

Status convertCpu(const OpStep &step, const HostStep &host) {
  // Only bf16 plans widen logits, and the CPU runs f32 plans, where a convert is a copy.
  if (step.operand(0).element != DType::F32) {
    return step.error(StatusCode::InvalidArgument, "the CPU backend converts only f32 buffers");
  }
  std::memcpy(host.f32Out(0), host.f32In(0),
              static_cast<size_t>(host.rows() * step.operandDim(0, 1)) * sizeof(float));
  return Status::success();
}

Status convertCheck(const OpStep &step) {
  Contract c(step);
  c.counts(1, 1, 0, 0, 0);
  const Shape x = c.operand(0, c.activation(), 2);
  c.resultIs(0, DType::F32, {x[0], x[1]});
  return c.status();
}

} // namespace glm::kernels
