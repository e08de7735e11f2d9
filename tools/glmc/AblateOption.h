// --ablate DIR_FILE [--ablate-layers A-B] [--ablate-alpha X] [--ablate-mtp]: the load-time
// refusal-direction ablation of the commands that load weights (generate, serve, worker).
#pragma once

#include "base/Status.h"
#include "models/glm53/Config.h"
#include "runtime/weights/PlanWeights.h"
#include "tools/glmc/CommandLine.h"

#include <optional>

namespace glm::tools {

/// Declares the options on `cl`.
void addAblateOptions(CommandLine &cl);

/// The ablation the options ask for, or nullopt without --ablate. The direction file is a
/// safetensors file holding one floating-point tensor of config.hidden_size values ([H] or
/// [1, H]); a direction of another width, layers outside the trunk, or the --ablate-* options
/// without --ablate are refused by name.
Expected<std::optional<Ablation>> ablationFromOptions(const CommandLine &cl,
                                                      const glm53::Glm53Config &config);

} // namespace glm::tools
