// argmax: CPU reference of greedy token choice, lowest id among equal maxima.
#include "kernels/argmax/argmax.h"

namespace glm::kernels {

Status argmaxRef(const ArgmaxArgs &a) {
  if (a.rows < 0 || a.vocab <= 0) {
    return invalidArgument("argmax: rows must be >= 0 and vocab > 0");
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    const float *x = a.logits + r * a.vocab;
    int64_t best = 0;
    for (int64_t i = 1; i < a.vocab; ++i) {
      // Strictly greater: an equal later value keeps the lower id; NaN compares false.
      if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) {
        best = i;
      }
    }
    a.out[r] = static_cast<int32_t>(best);
  }
  return Status::success();
}

} // namespace glm::kernels
