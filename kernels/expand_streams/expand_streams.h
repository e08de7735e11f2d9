// expand_streams: the launch contract of copying each embedding row into the mHC residual streams.
//
//   x    f32 [tokens, hidden]
//   out  f32 [tokens, streams, hidden]     out[t][s] = x[t] for every stream s (exact copies)
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct ExpandStreamsArgs {
  const float *x = nullptr;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t streams = 0; // hc_mult
  int64_t hidden = 0;
};

Status expandStreamsRef(const ExpandStreamsArgs &args);

} // namespace glm::kernels
