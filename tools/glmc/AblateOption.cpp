// The --ablate options: parsing, the direction file, and the checks against the model.
#include "tools/glmc/AblateOption.h"

#include "kernels/common/WeightView.h"
#include "runtime/weights/SafeTensors.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace glm::tools {

void addAblateOptions(CommandLine &cl) {
  cl.option("ablate", "DIR_FILE",
            "a direction (safetensors, one hidden_size vector) projected out of\nthe attention "
            "output projections at load: W -= alpha d (d^T W)")
      .option("ablate-layers", "A-B", "the layers ablated (default 15 to the last)")
      .option("ablate-alpha", "X", "the ablation's strength (default 3.0)")
      .flag("ablate-mtp", "also ablate the MTP layer");
}

namespace {

/// "A-B" (inclusive) or "A" (A to the trunk's last layer).
Status parseLayers(const std::string &text, int64_t layers, Ablation &out) {
  const size_t dash = text.find('-');
  auto number = [&](const std::string &part, int64_t &value) {
    char *end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || end == nullptr || *end != '\0' || v < 0 || v >= layers) {
      return invalidArgument("--ablate-layers is A-B or A with 0 <= A <= B < ", layers,
                             " (the trunk's layers), got '", text, "'");
    }
    value = v;
    return Status::success();
  };
  GLM_RETURN_IF_ERROR(number(text.substr(0, dash), out.firstLayer));
  out.lastLayer = layers - 1;
  if (dash != std::string::npos) {
    GLM_RETURN_IF_ERROR(number(text.substr(dash + 1), out.lastLayer));
  }
  if (out.lastLayer < out.firstLayer) {
    return invalidArgument("--ablate-layers '", text, "' ends before it starts");
  }
  return Status::success();
}

} // namespace

Expected<std::optional<Ablation>> ablationFromOptions(const CommandLine &cl,
                                                      const glm53::Glm53Config &config) {
  const std::optional<std::string> file = cl.get("ablate");
  if (!file) {
    for (const char *option : {"ablate-layers", "ablate-alpha", "ablate-mtp"}) {
      if (cl.has(option)) {
        return invalidArgument("--", option, " needs --ablate DIR_FILE");
      }
    }
    return std::optional<Ablation>();
  }
  Ablation ablation;
  const int64_t layers = config.numHiddenLayers;
  ablation.firstLayer = std::min<int64_t>(15, layers - 1);
  ablation.lastLayer = layers - 1;
  if (std::optional<std::string> text = cl.get("ablate-layers")) {
    GLM_RETURN_IF_ERROR(parseLayers(*text, layers, ablation));
  }
  if (std::optional<std::string> text = cl.get("ablate-alpha")) {
    char *end = nullptr;
    ablation.alpha = std::strtod(text->c_str(), &end);
    if (text->empty() || *end != '\0' || !(ablation.alpha >= 0.0 && ablation.alpha <= 100.0)) {
      return invalidArgument("--ablate-alpha is a number in [0, 100], got '", *text, "'");
    }
  }
  if (cl.has("ablate-mtp")) {
    if (config.numNextnPredictLayers < 1) {
      return invalidArgument("--ablate-mtp: the model has no MTP layer");
    }
    ablation.mtpLayer = layers;
  }

  GLM_ASSIGN_OR_RETURN(std::unique_ptr<SafeTensorsFile> st, SafeTensorsFile::open(*file));
  const TensorView *direction = nullptr;
  for (const TensorView &t : st->tensors()) {
    if (direction != nullptr) {
      return invalidArgument("--ablate ", *file, ": holds more than one tensor ('", direction->name,
                             "', '", t.name, "'); a direction file holds one");
    }
    direction = &t;
  }
  if (direction == nullptr) {
    return invalidArgument("--ablate ", *file, ": holds no tensor");
  }
  const int64_t width = direction->numel();
  const bool vector =
      direction->shape.size() == 1 || (direction->shape.size() == 2 && direction->shape[0] == 1);
  if (!vector || !isFloatingPoint(direction->dtype) || direction->dtype == DType::F8_E4M3) {
    return invalidArgument("--ablate ", *file, ": tensor '", direction->name, "' is ",
                           dtypeName(direction->dtype), " ", shapeText(direction->shape),
                           "; a direction is one F32, BF16 or F16 vector");
  }
  if (width != config.hiddenSize) {
    return invalidArgument("--ablate ", *file, ": direction '", direction->name, "' has ", width,
                           " values, but the model's hidden size is ", config.hiddenSize,
                           " (a direction from another model?)");
  }
  ablation.direction.resize(static_cast<size_t>(width));
  kernels::WeightView::raw(direction->data, direction->dtype, {width})
      .loadAll(ablation.direction.data());
  double norm = 0.0;
  for (float v : ablation.direction) {
    norm += static_cast<double>(v) * v;
  }
  if (!(norm > 0.0) || !std::isfinite(norm)) {
    return invalidArgument("--ablate ", *file, ": direction '", direction->name,
                           "' has no length (zero, or not finite)");
  }
  return std::optional<Ablation>(std::move(ablation));
}

} // namespace glm::tools
