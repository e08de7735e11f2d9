// mhc_pre: CPU reference of the mHC mixer: RMS-normalised mixing logits, Sinkhorn-projected
// stream mixer, and the pre-weighted stream collapse.
#include "kernels/mhc_pre/mhc_pre.h"

#include "kernels/common/Math.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace glm::kernels {

namespace {

/// Sinkhorn-Knopp as HF runs it: a row softmax (+eps), one column normalisation, then
/// iters − 1 rounds of (row, column) normalisation. C is [n, n] row-major, in place.
void sinkhorn(double *c, int64_t n, int64_t iters, double eps) {
  auto normaliseRows = [&] {
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        sum += c[i * n + j];
      }
      for (int64_t j = 0; j < n; ++j) {
        c[i * n + j] /= sum + eps;
      }
    }
  };
  auto normaliseColumns = [&] {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        sum += c[i * n + j];
      }
      for (int64_t i = 0; i < n; ++i) {
        c[i * n + j] /= sum + eps;
      }
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    double *row = c + i * n;
    const double peak = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - peak);
      sum += row[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      row[j] = row[j] / sum + eps;
    }
  }
  normaliseColumns();
  for (int64_t k = 1; k < iters; ++k) {
    normaliseRows();
    normaliseColumns();
  }
}

} // namespace

Status mhcPreRef(const MhcPreArgs &a) {
  const int64_t hc = a.hcMult;
  if (a.tokens < 0 || hc <= 0 || a.hidden <= 0 || a.sinkhornIters < 0) {
    return invalidArgument("mhc_pre: tokens >= 0, hc_mult > 0, hidden > 0 and "
                           "sinkhorn_iters >= 0 are required");
  }
  const int64_t mix = (2 + hc) * hc;
  const int64_t width = hc * a.hidden;
  GLM_RETURN_IF_ERROR(checkWeight(a.fn, "mhc fn", {mix, width}));
  GLM_RETURN_IF_ERROR(checkWeight(a.base, "mhc base", {mix}));
  GLM_RETURN_IF_ERROR(checkWeight(a.scale, "mhc scale", {3}));

  std::vector<float> fn(mix * width);
  std::vector<float> base(mix);
  std::vector<float> scale(3);
  a.fn.loadAll(fn.data());
  a.base.loadAll(base.data());
  a.scale.loadAll(scale.data());

  auto token = [&](int64_t begin, int64_t end) {
    std::vector<float> normed(width);
    std::vector<double> m(mix);
    std::vector<double> c(hc * hc);
    for (int64_t t = begin; t < end; ++t) {
      const float *streams = a.streams + t * width;
      const double meanSquare = sumSquares(streams, width) / static_cast<double>(width);
      const float inv = static_cast<float>(1.0 / std::sqrt(meanSquare + a.normEps));
      for (int64_t i = 0; i < width; ++i) {
        normed[i] = streams[i] * inv;
      }
      for (int64_t k = 0; k < mix; ++k) {
        m[k] = dot(fn.data() + k * width, normed.data(), width);
      }

      std::vector<double> pre(hc);
      for (int64_t s = 0; s < hc; ++s) {
        pre[s] = sigmoid(m[s] * scale[0] + base[s]) + a.hcEps;
        const double post = 2.0 * sigmoid(m[hc + s] * scale[1] + base[hc + s]);
        a.post[t * hc + s] = static_cast<float>(post);
        if (a.pre != nullptr) {
          a.pre[t * hc + s] = static_cast<float>(pre[s]);
        }
      }
      for (int64_t k = 0; k < hc * hc; ++k) {
        c[k] = m[2 * hc + k] * scale[2] + base[2 * hc + k];
      }
      sinkhorn(c.data(), hc, a.sinkhornIters, a.hcEps);
      for (int64_t k = 0; k < hc * hc; ++k) {
        a.comb[t * hc * hc + k] = static_cast<float>(c[k]);
      }

      float *x = a.x + t * a.hidden;
      for (int64_t d = 0; d < a.hidden; ++d) {
        double sum = 0.0;
        for (int64_t s = 0; s < hc; ++s) {
          sum += pre[s] * streams[s * a.hidden + d];
        }
        x[d] = static_cast<float>(sum);
      }
    }
  };
  parallelFor(a.tokens, std::max<int64_t>(1, (int64_t(1) << 16) / (mix * width)), token);
  return Status::success();
}

} // namespace glm::kernels
