// embedding on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   tokenIds  i32 [tokens]
//   table     W   [vocab, hidden]        embed_tokens.weight
//   out       T   [tokens, copies, hidden]
//
//   out[t][c][:] = table[tokenIds[t]][:]   for every copy c
//
// A token id outside [0, vocab) (a padding row's garbage, a bad prompt) reads nothing and writes
// zeros to its row: the CPU reference fails the step instead, but a kernel in a captured graph
// cannot, and a zero row is harmless and easy to spot.
//
// Grid (tokens, ceil(hidden / 1024)), 128 threads, one 8-element chunk of the row each.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

struct EmbeddingGpuArgs {
  const void *tokenIds; // i32
  const void *table;
  void *out;
  int64_t tokens;
  int64_t vocab;
  int64_t hidden;
  int64_t copies;
};

#ifndef __CUDACC_RTC__
inline LaunchDims embeddingLaunch(int64_t tokens, int64_t hidden) {
  return rowChunkLaunch(tokens, hidden);
}
#endif

} // namespace glm::kernels
