// The kernels' views of what runtime/weights holds: checkpoint tensors as the reference kernels'
// WeightView, EXL3 checkpoint groups and plan bindings as Exl3MatrixView, and an EXL3 binding's
// arena layout as the geometry kernels address it by. kernels/ knows none of runtime/'s types;
// these adapters are where the two meet.
#pragma once

#include "kernels/common/OpStep.h"
#include "kernels/common/WeightView.h"
#include "kernels/exl3/exl3.h"
#include "kernels/exl3/exl3_gpu.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>

namespace glm {

/// A checkpoint tensor as the reference kernels read it; `scaleInv` is its fp8 block-scale
/// companion, if any.
kernels::WeightView weightViewOf(const TensorView &tensor, const TensorView *scaleInv = nullptr);

/// A checkpoint's EXL3 group, given the layer's unpadded features.
kernels::Exl3MatrixView exl3MatrixOf(const Exl3Tensors &tensors, int64_t in, int64_t out);

/// Where an EXL3 binding's parts lie, as kernels address them.
kernels::Exl3Geometry exl3Geometry(const Exl3ArenaLayout &layout);

/// Matrix m of an EXL3 binding's slice.
inline kernels::Exl3MatrixView exl3MatrixInArena(const uint8_t *slice,
                                                 const Exl3ArenaLayout &layout, int64_t m) {
  return kernels::exl3MatrixAt(slice, exl3Geometry(layout), m);
}

/// An EXL3 binding at `slice` as the GPU kernels take it.
inline kernels::Exl3GpuWeights exl3GpuWeights(const void *slice, const Exl3ArenaLayout &layout) {
  return kernels::exl3GpuWeights(slice, exl3Geometry(layout));
}

} // namespace glm
