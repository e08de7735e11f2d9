// The kernels' views of checkpoint tensors and EXL3 bindings.
#include "runtime/weights/KernelViews.h"

#include <cassert>

namespace glm {

kernels::WeightView weightViewOf(const TensorView &tensor, const TensorView *scaleInv) {
  kernels::WeightView v;
  v.data = tensor.data;
  v.dtype = tensor.dtype;
  assert(tensor.shape.size() <= static_cast<size_t>(kernels::WeightView::kMaxRank));
  for (int64_t d : tensor.shape) {
    v.shape[v.rank++] = d;
  }
  if (scaleInv != nullptr) {
    v.blockScaleInv = reinterpret_cast<const float *>(scaleInv->data);
  }
  return v;
}

kernels::Exl3MatrixView exl3MatrixOf(const Exl3Tensors &tensors, int64_t in, int64_t out) {
  kernels::Exl3MatrixView m;
  m.trellis = reinterpret_cast<const uint16_t *>(tensors.trellis->data);
  m.suh = reinterpret_cast<const uint16_t *>(tensors.suh->data);
  m.svh = reinterpret_cast<const uint16_t *>(tensors.svh->data);
  if (tensors.bias != nullptr) {
    m.bias = tensors.bias->data;
    m.biasDType = tensors.bias->dtype;
  }
  m.bits = tensors.bits;
  m.codebook = tensors.codebook;
  m.in = in;
  m.out = out;
  return m;
}

kernels::Exl3Geometry exl3Geometry(const Exl3ArenaLayout &l) {
  return {l.matrices,        l.in,          l.out,         l.k,           l.n, l.slotBits,
          l.trellisStride(), l.suhOffset(), l.svhOffset(), l.metaOffset()};
}

} // namespace glm
