// The sampling settings of one request, as the server sets them and the sampler applies them.
#pragma once

#include <cstdint>

namespace glm::runtime {

struct SamplingParams {
  float temperature = 0.0f; // 0: greedy
  float topP = 1.0f;        // keep the most likely tokens until their mass reaches top_p
  int32_t topK = 0;         // 0: no limit
  float minP = 0.0f;        // drop tokens below min_p times the most likely one's probability
  uint64_t seed = 0;
};

} // namespace glm::runtime
