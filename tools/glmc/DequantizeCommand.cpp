// `glmc dequantize`: an EXL3 GLM-5.3 checkpoint into its dense bf16 equivalent, each EXL3 layer
// reconstructed as the CPU engine multiplies by it (kernels/exl3/exl3.h).
#include "base/InputFile.h"
#include "base/Progress.h"
#include "kernels/exl3/exl3.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/KernelViews.h"
#include "runtime/weights/SafeTensors.h"
#include "runtime/weights/SafeTensorsWriter.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace glm::tools {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

Status dequantizeCheckpoint(const fs::path &modelDir, const fs::path &outDir) {
  const fs::path configPath = modelDir / "config.json";
  GLM_ASSIGN_OR_RETURN(glm53::Glm53Config config, glm53::loadGlm53Config(modelDir));
  if (config.quantMethod != "exl3") {
    return invalidArgument(configPath.string(),
                           ": not an EXL3 checkpoint (quantization_config."
                           "quant_method is ",
                           config.quantMethod ? "'" + *config.quantMethod + "'" : "absent", ")");
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::open(modelDir));
  const std::vector<glm53::WeightInfo> table = glm53::glm53Weights(config);
  GLM_RETURN_IF_ERROR(
      glm53::checkpointMismatch(glm53::checkCheckpoint(table, *checkpoint), modelDir));
  GLM_RETURN_IF_ERROR(glm53::checkQuantization(config, table, *checkpoint));
  std::error_code ec;
  if (fs::exists(outDir, ec) && fs::equivalent(outDir, modelDir, ec)) {
    return invalidArgument("-o ", outDir.string(), " is the input directory");
  }
  fs::create_directories(outDir, ec);
  if (ec) {
    return ioError(outDir.string(), ": cannot create directory: ", ec.message());
  }

  // Dense tensors are copied; each EXL3 layer becomes `<key>.weight`, bf16 [out, in].
  std::vector<TensorSpec> specs;
  uint64_t totalBytes = 0;
  auto failure = std::make_shared<Status>();
  for (const glm53::WeightInfo &w : table) {
    if (const TensorView *t = checkpoint->find(w.name)) {
      specs.push_back({w.name, t->dtype, t->shape, [t](std::span<uint8_t> out) {
                         std::memcpy(out.data(), t->data, out.size());
                       }});
      totalBytes += t->byteSize;
      continue;
    }
    GLM_ASSIGN_OR_RETURN(Exl3Tensors layer, findExl3Tensors(*checkpoint, exl3ModuleKey(w.name),
                                                            w.shape[1], w.shape[0]));
    const kernels::Exl3MatrixView matrix = exl3MatrixOf(layer, w.shape[1], w.shape[0]);
    specs.push_back(
        {w.name, DType::BF16, w.shape, [matrix, failure, name = w.name](std::span<uint8_t> out) {
           Status s =
               kernels::exl3ReconstructBf16Ref(matrix, reinterpret_cast<uint16_t *>(out.data()));
           if (!s.ok() && failure->ok()) {
             *failure = s.withContext(strCat("tensor '", name, "'"));
           }
         }});
    totalBytes += static_cast<uint64_t>(w.numel()) * 2;
  }

  ProgressReporter::Options progressOptions;
  progressOptions.label = "dequantize " + outDir.filename().string();
  progressOptions.total = totalBytes;
  progressOptions.unit = ProgressReporter::Unit::Bytes;
  ProgressReporter progress(std::move(progressOptions));
  GLM_RETURN_IF_ERROR(writeCheckpointShards(outDir, specs, 5'000'000'000ull,
                                            [&](uint64_t bytes) { progress.advance(bytes); }));
  progress.finish();
  GLM_RETURN_IF_ERROR(*failure);

  // config.json without quantization_config (wherever the checkpoint kept it).
  // Read as loadGlm53Config read it above: bounded, depth-limited.
  GLM_ASSIGN_OR_RETURN(std::string text, readConfigJson(configPath));
  GLM_ASSIGN_OR_RETURN(
      OrderedJson root,
      parseUntrustedJson<OrderedJson>(text, configPath.string(), glm53::kMaxConfigJsonDepth));
  if (!root.is_object()) {
    return invalidArgument(configPath.string(), ": not a JSON object");
  }
  root.erase("quantization_config");
  if (root.contains("text_config") && root["text_config"].is_object()) {
    root["text_config"].erase("quantization_config");
  }
  std::ofstream out(outDir / "config.json", std::ios::binary | std::ios::trunc);
  out << root.dump(2) << "\n";
  out.close();
  if (!out) {
    return ioError((outDir / "config.json").string(), ": write failed");
  }
  return copyCheckpointCompanions(modelDir, outDir);
}

} // namespace

int runDequantize(const std::vector<std::string> &args) {
  CommandLine cl("glmc dequantize", "MODEL_DIR -o OUT_DIR",
                 "Writes the dense bf16 equivalent of an EXL3 checkpoint.");
  cl.option("output", "OUT_DIR", "the checkpoint directory to write").positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  if (!cl.get("output")) {
    return cl.fail(invalidArgument("-o OUT_DIR is required"));
  }
  if (Status status = dequantizeCheckpoint(cl.positionals()[0], *cl.get("output")); !status.ok()) {
    return cl.fail(status);
  }
  return 0;
}

} // namespace glm::tools
