// last_rows reference: a row copy per sequence.
#include "kernels/last_rows/last_rows.h"

#include <cstring>

namespace glm::kernels {

Status lastRowsRef(const LastRowsArgs &a) {
  if (a.x == nullptr || a.rows == nullptr || a.out == nullptr || a.count < 0 || a.width < 0) {
    return invalidArgument("last_rows: needs an input, its rows and an output");
  }
  for (int64_t b = 0; b < a.count; ++b) {
    if (a.rows[b] < 0) {
      return invalidArgument("last_rows: sequence ", b, " has no row (", a.rows[b], ")");
    }
    std::memcpy(a.out + b * a.width, a.x + a.rows[b] * a.width,
                static_cast<size_t>(a.width) * sizeof(float));
    if (a.positions != nullptr && a.picked != nullptr) {
      a.picked[b] = a.positions[a.rows[b]];
    }
  }
  return Status::success();
}

} // namespace glm::kernels
