// linear: the launch contract of a dense layer y = x Wᵀ (+ b), weights stored PyTorch-style.
//
//   x       f32 [rows, in]
//   weight      [out, in]      bf16 / f16 / f32 / fp8 e4m3 (+ 128x128 block scales)
//   bias        [out]          optional
//   y       f32 [rows, out]    must not alias x
//
//   y[r][o] = Σ_i x[r][i] · W[o][i]  (+ b[o])
//
// The reference splits the output features over threads (parallelFor) once the product is large
// enough to pay for it; every y element is one double-accumulated dot product, so the result does
// not depend on the thread count.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct LinearArgs {
  const float *x = nullptr;
  WeightView weight;
  WeightView bias;
  float *y = nullptr;
  int64_t rows = 0;
  int64_t inFeatures = 0;
  int64_t outFeatures = 0;
};

Status linearRef(const LinearArgs &args);

} // namespace glm::kernels
