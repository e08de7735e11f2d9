// embedding: the launch contract of the token-embedding row gather.
//
//   tokenIds  i32 [tokens]
//   table         [vocab, hidden]        weight (embed_tokens.weight)
//   out       f32 [tokens, copies, hidden]
//
//   out[t][c][:] = table[tokenIds[t]][:]   for every copy c
//
// `copies` > 1 writes the row into several slots at once: GLM-5.3 starts its hc_mult mHC residual
// streams as exact copies of the embedding (glm53_arch.md §2.1).
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

struct EmbeddingArgs {
  const int32_t *tokenIds = nullptr;
  WeightView table;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t copies = 1;
};

/// Fails on a token id outside [0, vocab).
Status embeddingRef(const EmbeddingArgs &args);

} // namespace glm::kernels
