// convert: the launch contract of widening bf16 activations to f32, as HF's `.float()` on the
// logits of a bf16 forward.
//
//   x   bf16 [count]   (encodings)
//   out f32  [count]
//
//   out[i] = x[i], exactly: every bf16 value is an f32 value.
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct ConvertArgs {
  const uint16_t *x = nullptr;
  float *out = nullptr;
  int64_t count = 0;
};

Status convertRef(const ConvertArgs &args);

} // namespace glm::kernels
