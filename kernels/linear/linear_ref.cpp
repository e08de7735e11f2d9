// linear: CPU reference of y = x Wᵀ + b, threaded over blocks of output features.
#include "kernels/linear/linear.h"

#include "kernels/common/Math.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

namespace {

/// Output features per task: their weight rows are widened once into a small fp32 block that
/// stays in cache while every input row is multiplied against it.
constexpr int64_t kFeatureBlock = 16;
/// Below this many multiply-adds the product runs on the calling thread.
constexpr int64_t kParallelMinMacs = int64_t(1) << 18;

} // namespace

Status linearRef(const LinearArgs &a) {
  if (a.rows < 0 || a.inFeatures <= 0 || a.outFeatures <= 0) {
    return invalidArgument("linear: rows must be >= 0 and in/out features > 0");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.weight, "linear weight", {a.outFeatures, a.inFeatures}));
  GLM_RETURN_IF_ERROR(checkOptionalWeight(a.bias, "linear bias", {a.outFeatures}));
  if (a.rows == 0) {
    return Status::success();
  }
  std::vector<float> bias(a.outFeatures, 0.0f);
  if (a.bias.present()) {
    a.bias.loadAll(bias.data());
  }

  const int64_t in = a.inFeatures;
  const int64_t out = a.outFeatures;
  auto block = [&](int64_t begin, int64_t end) {
    std::vector<float> w(kFeatureBlock * in);
    for (int64_t o0 = begin; o0 < end; o0 += kFeatureBlock) {
      const int64_t n = std::min(kFeatureBlock, end - o0);
      for (int64_t j = 0; j < n; ++j) {
        a.weight.loadRow(o0 + j, w.data() + j * in);
      }
      for (int64_t r = 0; r < a.rows; ++r) {
        const float *x = a.x + r * in;
        float *y = a.y + r * out + o0;
        for (int64_t j = 0; j < n; ++j) {
          y[j] = static_cast<float>(dot(x, w.data() + j * in, in) + bias[o0 + j]);
        }
      }
    }
  };
  if (a.rows * in * out < kParallelMinMacs) {
    block(0, out);
  } else {
    parallelFor(out, kFeatureBlock, block);
  }
  return Status::success();
}

Status exl3DenseLinearRef(const float *x, const Exl3MatrixView &weight, const WeightView &bias,
                          float *y, int64_t rows) {
  std::vector<uint16_t> dense(static_cast<size_t>(weight.out * weight.in));
  GLM_RETURN_IF_ERROR(exl3ReconstructBf16Ref(weight, dense.data()));
  return linearRef({.x = x,
                    .weight = WeightView::raw(dense.data(), DType::BF16, {weight.out, weight.in}),
                    .bias = bias,
                    .y = y,
                    .rows = rows,
                    .inFeatures = weight.in,
                    .outFeatures = weight.out});
}

} // namespace glm::kernels
