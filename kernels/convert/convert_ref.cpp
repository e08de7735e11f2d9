// convert: CPU reference of bf16 -> f32 widening.
#include "kernels/convert/convert.h"

#include "kernels/common/FloatFormats.h"

namespace glm::kernels {

Status convertRef(const ConvertArgs &a) {
  if (a.count < 0) {
    return invalidArgument("convert: count must be >= 0");
  }
  for (int64_t i = 0; i < a.count; ++i) {
    a.out[i] = bf16ToFloat(a.x[i]);
  }
  return Status::success();
}

} // namespace glm::kernels
