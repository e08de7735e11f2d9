// kda: CPU reference of the KDA gated delta rule, one token at a time, heads in parallel.
#include "kernels/kda/kda.h"

#include "kernels/common/Math.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace glm::kernels {

Status kdaRef(const KdaArgs &a) {
  const int64_t nh = a.heads;
  const int64_t dk = a.keyDim;
  const int64_t dv = a.valueDim;
  if (a.tokens < 0 || nh <= 0 || dk <= 0 || dv <= 0) {
    return invalidArgument("kda: tokens >= 0 and heads, key and value dims > 0 are required");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.aLog, "kda A_log", {nh}));
  GLM_RETURN_IF_ERROR(checkWeight(a.dtBias, "kda dt_bias", {nh * dk}));
  std::vector<float> aLog(nh);
  std::vector<float> dtBias(nh * dk);
  a.aLog.loadAll(aLog.data());
  a.dtBias.loadAll(dtBias.data());
  const double qScale = 1.0 / std::sqrt(static_cast<double>(dk));

  auto head = [&](int64_t h0, int64_t h1) {
    std::vector<double> qn(dk), kn(dk), decay(dk), delta(dv), acc(dv);
    for (int64_t h = h0; h < h1; ++h) {
      float *s = a.state + h * dk * dv;
      const double rate = std::exp(static_cast<double>(aLog[h]));
      for (int64_t t = 0; t < a.tokens; ++t) {
        const float *q = a.q + (t * nh + h) * dk;
        const float *k = a.k + (t * nh + h) * dk;
        const float *v = a.v + (t * nh + h) * dv;
        const float *f = a.f + (t * nh + h) * dk;
        const double qInv = 1.0 / std::sqrt(sumSquares(q, dk) + a.l2Eps);
        const double kInv = 1.0 / std::sqrt(sumSquares(k, dk) + a.l2Eps);
        for (int64_t i = 0; i < dk; ++i) {
          qn[i] = q[i] * qInv * qScale;
          kn[i] = k[i] * kInv;
          const double g =
              a.lowerBound * sigmoid(rate * (f[i] + static_cast<double>(dtBias[h * dk + i])));
          decay[i] = std::exp(g);
        }
        const double beta = sigmoid(static_cast<double>(a.b[t * nh + h]));

        // S ← diag(exp g) S, then m = Sᵀ k̂ and δ = β (v − m).
        std::fill(delta.begin(), delta.end(), 0.0);
        for (int64_t i = 0; i < dk; ++i) {
          float *row = s + i * dv;
          for (int64_t j = 0; j < dv; ++j) {
            row[j] = static_cast<float>(row[j] * decay[i]);
            delta[j] += row[j] * kn[i];
          }
        }
        for (int64_t j = 0; j < dv; ++j) {
          delta[j] = beta * (v[j] - delta[j]);
        }
        // S ← S + k̂ δᵀ, then o = Sᵀ q̂.
        float *o = a.out + (t * nh + h) * dv;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t i = 0; i < dk; ++i) {
          float *row = s + i * dv;
          for (int64_t j = 0; j < dv; ++j) {
            row[j] = static_cast<float>(row[j] + kn[i] * delta[j]);
            acc[j] += row[j] * qn[i];
          }
        }
        for (int64_t j = 0; j < dv; ++j) {
          o[j] = static_cast<float>(acc[j]);
        }
      }
    }
  };
  parallelFor(nh, 1, head);
  return Status::success();
}

} // namespace glm::kernels
