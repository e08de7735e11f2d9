// concat reference: row by row.
#include "kernels/concat/concat.h"

#include <cstring>

namespace glm::kernels {

Status concatRef(const ConcatArgs &a) {
  if (a.inputs.size() != a.widths.size() || a.inputs.empty() || a.out == nullptr || a.rows < 0) {
    return invalidArgument("concat: needs one width per input and an output");
  }
  int64_t total = 0;
  for (int64_t w : a.widths) {
    if (w < 0) {
      return invalidArgument("concat: negative width ", w);
    }
    total += w;
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    int64_t offset = 0;
    for (size_t i = 0; i < a.inputs.size(); ++i) {
      std::memcpy(a.out + r * total + offset, a.inputs[i] + r * a.widths[i],
                  static_cast<size_t>(a.widths[i]) * sizeof(float));
      offset += a.widths[i];
    }
  }
  return Status::success();
}

} // namespace glm::kernels
