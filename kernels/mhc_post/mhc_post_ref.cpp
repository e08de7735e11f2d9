// mhc_post: CPU reference of the mHC residual update X'[j] = post[j]·y + Σ_i comb[i][j]·R[i].
#include "kernels/mhc_post/mhc_post.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

Status mhcPostRef(const MhcPostArgs &a) {
  const int64_t hc = a.hcMult;
  if (a.tokens < 0 || hc <= 0 || a.hidden <= 0) {
    return invalidArgument("mhc_post: tokens >= 0, hc_mult > 0 and hidden > 0 are required");
  }
  // One token's new streams are built aside, so `out` may overwrite `residual`.
  std::vector<float> next(hc * a.hidden);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float *y = a.y + t * a.hidden;
    const float *r = a.residual + t * hc * a.hidden;
    const float *post = a.post + t * hc;
    const float *comb = a.comb + t * hc * hc;
    for (int64_t j = 0; j < hc; ++j) {
      for (int64_t d = 0; d < a.hidden; ++d) {
        double sum = static_cast<double>(post[j]) * y[d];
        for (int64_t i = 0; i < hc; ++i) {
          sum += static_cast<double>(comb[i * hc + j]) * r[i * a.hidden + d];
        }
        next[j * a.hidden + d] = static_cast<float>(sum);
      }
    }
    std::copy(next.begin(), next.end(), a.out + t * hc * a.hidden);
  }
  return Status::success();
}

} // namespace glm::kernels
