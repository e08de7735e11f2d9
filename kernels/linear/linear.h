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
#include "kernels/exl3/exl3.h"

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

/// The CPU engine's EXL3 linear: y = x Wᵀ with W the bf16 dense equivalent (the linear.h
/// contract, so the result equals that of the dequantized checkpoint). `bias` is the plan's
/// separate bias weight, if any.
Status exl3DenseLinearRef(const float *x, const Exl3MatrixView &weight, const WeightView &bias,
                          float *y, int64_t rows);

} // namespace glm::kernels
