// mla_sparse_attention: CPU reference of NoPE MLA over the indexer's selection, in absorbed form.
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"

#include "kernels/common/Math.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace glm::kernels {

Status mlaSparseAttentionRef(const MlaSparseAttentionArgs &a) {
  const int64_t nh = a.heads;
  const int64_t dqk = a.qkHeadDim;
  const int64_t dv = a.vHeadDim;
  const int64_t rank = a.kvLoraRank;
  if (a.tokens < 0 || nh <= 0 || dqk <= 0 || dv <= 0 || rank <= 0 || a.selectedWidth < 0) {
    return invalidArgument("mla_sparse_attention: tokens >= 0 and heads, head dims and rank > 0 "
                           "are required");
  }
  if (a.cache == nullptr) {
    return invalidArgument("mla_sparse_attention: a cache is required");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.kvB, "mla kv_b_proj", {nh * (dqk + dv), rank}));
  MlaLatentCache &cache = *a.cache;
  const int64_t start = cache.length;
  const int64_t end = start + a.tokens;
  if (end > cache.maxTokens) {
    return invalidArgument("mla_sparse_attention: the cache holds ", cache.maxTokens,
                           " tokens, this call needs ", end);
  }
  // Validate every selected position before anything is written: causal and inside the cache.
  for (int64_t i = 0; i < a.tokens; ++i) {
    for (int64_t s = 0; s < a.selectedWidth; ++s) {
      const int64_t pos = a.selected[i * a.selectedWidth + s];
      if (pos > start + i) {
        return invalidArgument("mla_sparse_attention: query at position ", start + i,
                               " selects position ", pos, ", which is not causally visible");
      }
    }
  }
  std::copy(a.latent, a.latent + a.tokens * rank, cache.latents + start * rank);
  cache.length = end;

  std::vector<float> kvB(nh * (dqk + dv) * rank);
  a.kvB.loadAll(kvB.data());

  auto query = [&](int64_t i0, int64_t i1) {
    std::vector<int64_t> positions;
    std::vector<double> qAbsorbed(rank), mixed(rank), score;
    for (int64_t i = i0; i < i1; ++i) {
      positions.clear();
      for (int64_t s = 0; s < a.selectedWidth; ++s) {
        const int32_t pos = a.selected[i * a.selectedWidth + s];
        if (pos >= 0) {
          positions.push_back(pos);
        }
      }
      std::sort(positions.begin(), positions.end());
      positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
      const int64_t n = static_cast<int64_t>(positions.size());
      score.resize(n);

      for (int64_t h = 0; h < nh; ++h) {
        const float *q = a.q + (i * nh + h) * dqk;
        const float *wk = kvB.data() + h * (dqk + dv) * rank; // [dqk, rank]
        const float *wv = wk + dqk * rank;                    // [dv, rank]
        float *o = a.out + (i * nh + h) * dv;
        if (n == 0) {
          std::fill(o, o + dv, 0.0f);
          continue;
        }
        // q̃ = Wkᵀ q: the query moved into latent space.
        std::fill(qAbsorbed.begin(), qAbsorbed.end(), 0.0);
        for (int64_t e = 0; e < dqk; ++e) {
          for (int64_t c = 0; c < rank; ++c) {
            qAbsorbed[c] += static_cast<double>(q[e]) * wk[e * rank + c];
          }
        }
        // s_j = scale · q̃ · c_j; softmax over the selected set.
        double peak = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          const float *c = cache.latents + positions[j] * rank;
          for (int64_t k = 0; k < rank; ++k) {
            s += qAbsorbed[k] * c[k];
          }
          score[j] = s * a.scale;
          peak = std::max(peak, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          score[j] = std::exp(score[j] - peak);
          sum += score[j];
        }
        // ĉ = Σ_j a_j c_j, then o = Wv ĉ.
        std::fill(mixed.begin(), mixed.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double weight = score[j] / sum;
          const float *c = cache.latents + positions[j] * rank;
          for (int64_t k = 0; k < rank; ++k) {
            mixed[k] += weight * c[k];
          }
        }
        for (int64_t e = 0; e < dv; ++e) {
          double v = 0.0;
          for (int64_t k = 0; k < rank; ++k) {
            v += mixed[k] * wv[e * rank + k];
          }
          o[e] = static_cast<float>(v);
        }
      }
    }
  };
  parallelFor(a.tokens, 4, query);
  return Status::success();
}

} // namespace glm::kernels
