// WeightView: a read-only view of one weight tensor in its stored dtype, widened to fp32 per
// element.
#pragma once

#include "base/DType.h"
#include "base/Status.h"
#include "kernels/common/DenseFormats.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace glm::kernels {

/// Reference kernels read weights where the checkpoint or the weights arena holds them (bf16, f16,
/// f32, fp8 e4m3 with 128 x 128 block scales, or Q4 groups: kernels/common/DenseFormats.h) and
/// widen each element to fp32 on use, so a weight is never copied or converted ahead of time. A
/// view with data == nullptr is "absent" (an optional bias, say).
struct WeightView {
  static constexpr int kMaxRank = 4;

  const void *data = nullptr;
  DType dtype = DType::F32;
  std::array<int64_t, kMaxRank> shape{};
  int rank = 0;
  /// fp8 only: the `weight_scale_inv` companion, f32 [ceil(rows/blockRows), ceil(cols/blockCols)]
  /// over the tensor seen as 2-D [shape[0], numel/shape[0]]; the stored value times its block's
  /// scale is the weight (DeepSeek/GLM FP8: 128 x 128 blocks).
  const float *blockScaleInv = nullptr;
  int64_t blockRows = 128;
  int64_t blockCols = 128;
  /// Q4 groups (dtype U8, `data` the code plane, `shape` the logical [rows, cols]): the f16
  /// (scale, minimum) pairs of each group of kQ4Group features, [rows][cols / kQ4Group][2].
  const uint16_t *q4Groups = nullptr;

  bool present() const { return data != nullptr; }
  int64_t dim(int i) const { return shape[i]; }
  int64_t numel() const;
  /// The tensor as 2-D [rows, cols]: rows = shape[0].
  int64_t rows() const { return rank == 0 ? 1 : shape[0]; }
  int64_t cols() const;

  /// Element i (row-major), widened to fp32.
  float load(int64_t i) const;
  /// Row r of the 2-D view, widened into out[0, cols()).
  void loadRow(int64_t r, float *out) const;
  /// Every element, widened into out[0, numel()).
  void loadAll(float *out) const;

  /// A view of fp32 data (tests, and weights computed at load time).
  static WeightView f32(const float *data, std::initializer_list<int64_t> shape);
  /// A view of raw data in any float dtype.
  static WeightView raw(const void *data, DType dtype, std::initializer_list<int64_t> shape);
  /// A view of one [rows, cols] matrix in `encoding` at `bytes`, laid out as DenseFormats.h says
  /// (Plain: elements of `plain`).
  static WeightView encoded(const void *bytes, DenseEncoding encoding, DType plain, int64_t rows,
                            int64_t cols);
};

/// Checks that `view` is present and has `expected` as its shape, ignoring size-1 dimensions on
/// both sides (a conv kernel [C, 1, K] matches {C, K}), and that its dtype is one this library
/// widens. `what` names the weight in the error.
Status checkWeight(const WeightView &view, std::string_view what,
                   std::initializer_list<int64_t> expected);
/// The same for an optional weight: an absent view passes.
Status checkOptionalWeight(const WeightView &view, std::string_view what,
                           std::initializer_list<int64_t> expected);

} // namespace glm::kernels
