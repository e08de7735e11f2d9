// add reference.
#include "kernels/add/add.h"

namespace glm::kernels {

Status addRef(const AddArgs &args) {
  if (args.a == nullptr || args.b == nullptr || args.out == nullptr || args.count < 0) {
    return invalidArgument("add: bad arguments");
  }
  for (int64_t i = 0; i < args.count; ++i) {
    args.out[i] = args.a[i] + args.b[i];
  }
  return Status::success();
}

} // namespace glm::kernels
