// short_conv: the launch contract of KDA's causal depthwise short convolution with a carried state.
//
//   x       f32 [tokens, channels]        u_t: this chunk's inputs
//   weight      [channels, 1, kernel]     (or [channels, kernel]); w[c][j]
//   state   f32 [channels, kernel − 1]    in/out, optional: the last kernel − 1 inputs before this
//                                         chunk, oldest first (zeros at sequence start); on return,
//                                         the last kernel − 1 inputs up to the end of this chunk
//   out     f32 [tokens, channels]        may alias x
//
//   z_t[c]   = Σ_{j=0..K−1} w[c][j] · u_{t−(K−1)+j}[c]      (u before the sequence start = 0)
//   out_t[c] = act(z_t[c])                                   act = SiLU for KDA (hidden_act)
//
// Running a sequence in chunks with the state carried between them gives exactly the result of one
// chunk: the state is all a causal conv needs of the past.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

enum class ConvActivation { None, Silu };

struct ShortConvArgs {
  const float *x = nullptr;
  WeightView weight;
  float *state = nullptr; // optional: absent = zero history, nothing kept
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t channels = 0;
  int64_t kernelSize = 0;
  ConvActivation activation = ConvActivation::Silu;
};

Status shortConvRef(const ShortConvArgs &args);

} // namespace glm::kernels
