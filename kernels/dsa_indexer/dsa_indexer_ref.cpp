// dsa_indexer: CPU reference of the KPool lightning indexer: close pools as tokens arrive, score
// the closed pools per query, keep the top ones and the open pool's tail.
#include "kernels/dsa_indexer/dsa_indexer.h"

#include "kernels/common/Math.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

namespace glm::kernels {

namespace {

/// Kp[c] = Σ_r softmax_r(gates[r][c] + ape[r][c]) · keys[r][c] over the R rows of a full pool.
void poolKey(const float *keys, const float *gates, const float *ape, int64_t r, int64_t d,
             float *out) {
  std::vector<double> logit(r);
  for (int64_t c = 0; c < d; ++c) {
    double peak = -INFINITY;
    for (int64_t i = 0; i < r; ++i) {
      logit[i] = static_cast<double>(gates[i * d + c]) + ape[i * d + c];
      peak = std::max(peak, logit[i]);
    }
    double sum = 0.0;
    double weighted = 0.0;
    for (int64_t i = 0; i < r; ++i) {
      const double e = std::exp(logit[i] - peak);
      sum += e;
      weighted += e * keys[i * d + c];
    }
    out[c] = static_cast<float>(weighted / sum);
  }
}

} // namespace

Status dsaIndexerRef(const DsaIndexerArgs &a) {
  const int64_t d = a.headDim;
  const int64_t nh = a.heads;
  const int64_t r = a.kpool;
  if (a.tokens < 0 || nh <= 0 || d <= 0 || r <= 0 || a.topk <= 0) {
    return invalidArgument("dsa_indexer: tokens >= 0 and heads, head_dim, kpool, topk > 0 are "
                           "required");
  }
  if (a.topk % r != 0) {
    return invalidArgument("dsa_indexer: index_topk (", a.topk, ") must be a multiple of kpool (",
                           r, ")");
  }
  if (a.cache == nullptr) {
    return invalidArgument("dsa_indexer: a cache is required");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.ape, "dsa_indexer ape", {r, d}));
  DsaIndexerCache &cache = *a.cache;
  const int64_t start = cache.length;
  const int64_t end = start + a.tokens;
  if (end / r > cache.maxPools) {
    return invalidArgument("dsa_indexer: the cache holds ", cache.maxPools, " pools, but ", end,
                           " tokens close ", end / r);
  }
  if (a.poolScores != nullptr && a.poolScoresStride < end / r) {
    return invalidArgument("dsa_indexer: pool score rows hold ", a.poolScoresStride, " pools, ",
                           end / r, " are closed after this call");
  }
  std::vector<float> ape(r * d);
  a.ape.loadAll(ape.data());

  // 1. Append: each token's kI/gI goes to its slot of the open pool; the pool's last token closes
  // it into a pooled key.
  for (int64_t i = 0; i < a.tokens; ++i) {
    const int64_t t = start + i;
    const int64_t slot = t % r;
    std::copy(a.k + i * d, a.k + (i + 1) * d, cache.openKeys + slot * d);
    std::copy(a.gate + i * d, a.gate + (i + 1) * d, cache.openGates + slot * d);
    if (slot == r - 1) {
      poolKey(cache.openKeys, cache.openGates, ape.data(), r, d, cache.poolKeys + (t / r) * d);
    }
  }
  cache.length = end;

  // 2. Score and select, query by query; each reads only pools closed at or before its position.
  const int64_t width = dsaIndexerWidth(a.topk, r, a.alwaysSelectTail);
  const int64_t maxChosen = a.topk / r;
  const int64_t pools = end / r; // closed pools after this call's appends
  const double scoreScale = 1.0 / std::sqrt(static_cast<double>(d));
  const double headScale = 1.0 / std::sqrt(static_cast<double>(nh));
  auto query = [&](int64_t i0, int64_t i1) {
    std::vector<double> score, ranked;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = start + i;
      const int64_t candidates = (t + 1) / r;
      const float *q = a.q + i * nh * d;
      const float *w = a.headWeights + i * nh;
      score.assign(candidates, 0.0);
      for (int64_t p = 0; p < candidates; ++p) {
        double sum = 0.0;
        for (int64_t h = 0; h < nh; ++h) {
          const double s = dot(q + h * d, cache.poolKeys + p * d, d) * scoreScale;
          sum += w[h] * headScale * std::max(s, 0.0);
        }
        score[p] = sum;
      }
      if (a.poolScores != nullptr) {
        float *out = a.poolScores + i * a.poolScoresStride;
        std::fill(out, out + a.poolScoresStride, -INFINITY);
        for (int64_t p = 0; p < candidates; ++p) {
          out[p] = static_cast<float>(score[p]);
        }
      }
      std::vector<int64_t> chosen;
      if (a.tieRule == TopkTieRule::TorchCpu) {
        // HF ranks every closed pool, non-candidates at float32 min, with fp32 scores, keeps
        // min(topk / R, pools) and then drops the non-candidates it picked.
        ranked.assign(pools, -static_cast<double>(FLT_MAX));
        for (int64_t p = 0; p < candidates; ++p) {
          ranked[p] = static_cast<float>(score[p]);
        }
        for (int64_t p : topkIndices(ranked, maxChosen, a.tieRule)) {
          if (p < candidates) {
            chosen.push_back(p);
          }
        }
      } else {
        chosen = topkIndices(score, maxChosen, a.tieRule);
      }
      int32_t *row = a.selected + i * width;
      std::fill(row, row + width, -1);
      for (size_t c = 0; c < chosen.size(); ++c) {
        for (int64_t j = 0; j < r; ++j) {
          row[c * r + j] = static_cast<int32_t>(chosen[c] * r + j);
        }
      }
      if (a.alwaysSelectTail) {
        for (int64_t pos = candidates * r, j = 0; pos <= t; ++pos, ++j) {
          row[a.topk + j] = static_cast<int32_t>(pos);
        }
      }
    }
  };
  parallelFor(a.tokens, 16, query);
  return Status::success();
}

} // namespace glm::kernels
