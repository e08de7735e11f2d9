// Fuzzes config.json through parseGlm53Config, then what `glmc info` derives from an accepted
// config: the tensor table, parameter counts, bytes per decoded token and state sizes.
#include "models/glm53/Budget.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  glm::Expected<glm::glm53::Glm53Config> config = glm::glm53::parseGlm53Config(text, "config.json");
  if (!config.ok()) {
    return 0;
  }
  const std::vector<glm::glm53::WeightInfo> table = glm::glm53::glm53Weights(*config);
  // Budget.h: a parsed config's ranges keep every count inside 64 bits, so none may fail here.
  glm::Expected<glm::glm53::ParameterCounts> counts = glm::glm53::countParameters(*config, table);
  GLM_FUZZ_CHECK(counts.ok(), counts.status().toString());
  GLM_FUZZ_CHECK(counts->total >= 0 && counts->activePerToken >= 0, "negative parameter count");
  glm::Expected<glm::glm53::DecodeWeightBytes> bytes =
      glm::glm53::decodeWeightBytes(*config, table, nullptr);
  GLM_FUZZ_CHECK(bytes.ok(), bytes.status().toString());
  glm::Expected<glm::glm53::StateBytes> state = glm::glm53::stateBytes(*config);
  GLM_FUZZ_CHECK(state.ok(), state.status().toString());
  return 0;
}
