// Program shapes and weight formats from the command line and the model directory.
#include "tools/glmc/ModelInputs.h"

#include "compiler/pipelines/CompilePipeline.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/SafeTensors.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

namespace glm::tools {

void addCompileShapeOptions(CommandLine &cl) {
  cl.option("target", "cpu|sm_90a|sm_121a", "the machine the plan runs on (default sm_121a)")
      .option("tp", "N",
              "tensor-parallel ranks the model is split across (default 2 on a GPU,\n1 on the "
              "CPU)")
      .option("decode", "BxR,...",
              "decode programs: B sequences of R rows each (default 1x1 and\nmax-seqs x 1)")
      .option("prefill", "C,...", "prefill programs of C-token chunks")
      .option("prefill-logits", "last|all",
              "prefill logits of each chunk's last row (serving, the default)\nor of every row "
              "(--dump-logits, golden tests)")
      .option("assume-weights", "bf16|exl3-experts:K",
              "the storage to assume when MODEL_DIR holds only config.json")
      .option("dense", "bf16|q4|fp8",
              "dense linears quantized at load (default: q4 for GPU bf16 plans,\nas stored "
              "otherwise; docs/quantization.md)")
      .option("head", "bf16|q4|fp8", "lm_head's encoding (default: fp8 for GPU bf16 plans)")
      .option("mtp", "on|off",
              "the MTP head in every program, drafting a token a row (default on\nwhere the "
              "checkpoint has the layer; docs/speculative-decoding.md)")
      .option("group-linears", "on|off",
              "independent decode linears of one width in one launch where the\ntarget's "
              "kernel takes them (default on; off to compare against)")
      .option("group-short-convs", "on|off",
              "a KDA layer's q/k/v convs in one launch (default on; off to\ncompare against)")
      .option("fuse-mhc", "on|off",
              "each mhc_post folded into the mhc_pre that reads its streams\n(default on; off "
              "to compare against)")
      .option("fuse-mhc-norm", "on|off",
              "each sub-block's input RMSNorm folded into the mhc_pre whose x\nit normalises "
              "(default on; off to compare against)")
      .option("fuse-kda-norm", "on|off",
              "KDA's gated output norm folded into its recurrence's launch\n(default on; off "
              "to compare against)")
      .option("fuse-linear-add", "on|off",
              "an add folded into the linear whose output it reads (default on;\noff to compare "
              "against)");
}

namespace {

/// An on|off option, `fallback` when absent.
Expected<bool> onOff(const CommandLine &cl, const char *name, bool fallback) {
  const std::optional<std::string> value = cl.get(name);
  if (!value) {
    return fallback;
  }
  if (*value != "on" && *value != "off") {
    return invalidArgument("--", name, " is on or off, got '", *value, "'");
  }
  return *value == "on";
}

} // namespace

Status fusionsFromOptions(const CommandLine &cl, compiler::CompileOptions &options) {
  Expected<bool> group = onOff(cl, "group-linears", options.groupLinears);
  GLM_RETURN_IF_ERROR(group.status());
  Expected<bool> convs = onOff(cl, "group-short-convs", options.groupShortConvs);
  GLM_RETURN_IF_ERROR(convs.status());
  Expected<bool> mhc = onOff(cl, "fuse-mhc", options.fuseMhc);
  GLM_RETURN_IF_ERROR(mhc.status());
  Expected<bool> mhcNorm = onOff(cl, "fuse-mhc-norm", options.fuseMhcNorm);
  GLM_RETURN_IF_ERROR(mhcNorm.status());
  Expected<bool> kdaNorm = onOff(cl, "fuse-kda-norm", options.fuseKdaNorm);
  GLM_RETURN_IF_ERROR(kdaNorm.status());
  Expected<bool> linearAdd = onOff(cl, "fuse-linear-add", options.fuseLinearAdd);
  GLM_RETURN_IF_ERROR(linearAdd.status());
  options.groupLinears = *group;
  options.groupShortConvs = *convs;
  options.fuseMhc = *mhc;
  options.fuseMhcNorm = *mhcNorm;
  options.fuseKdaNorm = *kdaNorm;
  options.fuseLinearAdd = *linearAdd;
  return Status::success();
}

Expected<bool> mtpFromOptions(const CommandLine &cl, const glm53::Glm53Config &config) {
  const std::optional<std::string> mtp = cl.get("mtp");
  if (!mtp) {
    return config.hasMtp();
  }
  if (*mtp != "on" && *mtp != "off") {
    return invalidArgument("--mtp is on or off, got '", *mtp, "'");
  }
  if (*mtp == "on" && !config.hasMtp()) {
    return invalidArgument("--mtp on: the checkpoint has no MTP layer (num_nextn_predict_layers "
                           "is 0)");
  }
  return *mtp == "on";
}

/// "4x1,1x8" -> decode programs {B=4,R=1}, {B=1,R=8}.
Expected<std::vector<glm53::ProgramShape>> parseDecodeShapes(const std::string &text) {
  std::vector<glm53::ProgramShape> shapes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    glm53::ProgramShape p;
    long long b = 0, r = 0;
    char x = 0, extra = 0;
    if (std::sscanf(item.c_str(), "%lld%c%lld%c", &b, &x, &r, &extra) != 3 || x != 'x' || b < 1 ||
        r < 1 || b > 4096 || r > 4096) {
      return invalidArgument("--decode takes BxR[,BxR...], got '", item, "'");
    }
    p.kind = glm53::ProgramShape::Kind::Decode;
    p.batch = b;
    p.rows = r;
    shapes.push_back(p);
  }
  return shapes;
}

Expected<std::vector<glm53::ProgramShape>> parsePrefillShapes(const std::string &text) {
  std::vector<glm53::ProgramShape> shapes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char *end = nullptr;
    const long long c = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || c < 1 || c > 65536) {
      return invalidArgument("--prefill takes C[,C...] chunk sizes, got '", item, "'");
    }
    shapes.push_back({glm53::ProgramShape::Kind::Prefill, 1, c});
  }
  return shapes;
}

/// How the checkpoint stores each tensor: from its safetensors header when weights are present,
/// else from --assume-weights.
Expected<WeightFormats> weightFormats(const std::string &modelDir,
                                      const std::optional<std::string> &assume) {
  if (Checkpoint::hasWeights(modelDir)) {
    if (assume) {
      return invalidArgument("--assume-weights is for a config.json without "
                             "weights; ",
                             modelDir, " has weights");
    }
    GLM_ASSIGN_OR_RETURN(std::shared_ptr<Checkpoint> checkpoint, Checkpoint::open(modelDir));
    // EXL3 layers (a `<key>.trellis` instead of `<key>.weight`): the plan reserves room for the
    // largest K of the checkpoint in every EXL3 slice, since K may differ per tensor.
    GLM_ASSIGN_OR_RETURN(glm53::Glm53Config config, glm53::loadGlm53Config(modelDir));
    const std::vector<glm53::WeightInfo> table = glm53::glm53Weights(config);
    GLM_RETURN_IF_ERROR(glm53::checkQuantization(config, table, *checkpoint));
    int64_t maxBits = 0;
    for (const glm53::WeightInfo &w : table) {
      if (w.role == glm53::WeightRole::Linear && checkpoint->find(w.name) == nullptr) {
        const TensorView *trellis = checkpoint->find(exl3ModuleKey(w.name) + ".trellis");
        if (trellis != nullptr && trellis->shape.size() == 3) {
          maxBits = std::max<int64_t>(maxBits, trellis->shape[2] / 16);
        }
      }
    }
    if (maxBits > kExl3MaxBits) {
      return invalidArgument(modelDir, ": an EXL3 trellis holds ", maxBits,
                             " bits per weight; at most 8 are defined");
    }
    auto formatOf = [checkpoint](const glm53::WeightInfo &w) {
      const TensorView *t = checkpoint->find(w.name);
      if (t == nullptr && w.role == glm53::WeightRole::Linear &&
          hasExl3Tensors(*checkpoint, exl3ModuleKey(w.name))) {
        return ir::WeightFormat::EXL3;
      }
      switch (t != nullptr ? t->dtype : w.releaseDType) {
      case DType::F32:
        return ir::WeightFormat::F32;
      case DType::F16:
        return ir::WeightFormat::F16;
      case DType::F8_E4M3:
        return ir::WeightFormat::FP8;
      default:
        return ir::WeightFormat::BF16;
      }
    };
    return WeightFormats{formatOf, maxBits > 0 ? maxBits : 4};
  }
  const std::string mode = assume.value_or("bf16");
  if (mode == "bf16") {
    return WeightFormats{};
  }
  if (mode.rfind("exl3-experts:", 0) == 0) {
    const std::string bits = mode.substr(13);
    if (bits.size() != 1 || bits[0] < '1' || bits[0] > '8') {
      return invalidArgument("--assume-weights exl3-experts:K takes K in 1..8, got '", bits, "'");
    }
    auto formatOf = [](const glm53::WeightInfo &w) {
      if (w.component == glm53::Component::RoutedExpert) {
        return ir::WeightFormat::EXL3;
      }
      return w.releaseDType == DType::F32 ? ir::WeightFormat::F32 : ir::WeightFormat::BF16;
    };
    return WeightFormats{formatOf, bits[0] - '0'};
  }
  return invalidArgument("--assume-weights is bf16 or exl3-experts:K, got '", mode, "'");
}

Expected<std::vector<glm53::ProgramShape>> programsFromOptions(const CommandLine &cl) {
  std::vector<glm53::ProgramShape> programs;
  if (std::optional<std::string> text = cl.get("decode")) {
    GLM_ASSIGN_OR_RETURN(auto shapes, parseDecodeShapes(*text));
    programs.insert(programs.end(), shapes.begin(), shapes.end());
  }
  if (std::optional<std::string> text = cl.get("prefill")) {
    GLM_ASSIGN_OR_RETURN(auto shapes, parsePrefillShapes(*text));
    programs.insert(programs.end(), shapes.begin(), shapes.end());
  }
  return programs;
}

} // namespace glm::tools
