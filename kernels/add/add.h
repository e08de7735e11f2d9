// add: the launch contract of an elementwise sum (the shared expert onto the routed experts, the
// MTP block's plain residuals).
//
//   a, b  f32 [count]
//   out   f32 [count]     out = a + b; may alias a or b
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct AddArgs {
  const float *a = nullptr;
  const float *b = nullptr;
  float *out = nullptr;
  int64_t count = 0;
};

Status addRef(const AddArgs &args);

} // namespace glm::kernels
