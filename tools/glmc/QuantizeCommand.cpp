// `glmc quantize`: a dense GLM-5.3 checkpoint into an EXL3 one in exllamav3's layout
// (reference/exl3_format.md §1), with our own encoder (kernels/exl3/exl3_quantize.h).
#include "base/Hash.h"
#include "base/InputFile.h"
#include "base/Progress.h"
#include "kernels/common/WeightView.h"
#include "kernels/exl3/exl3_quantize.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/Exl3Writer.h"
#include "runtime/weights/KernelViews.h"
#include "runtime/weights/SafeTensors.h"
#include "runtime/weights/SafeTensorsWriter.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace glm::tools {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

/// Which linear weights become EXL3. Everything stays dense that a plan does not run through a
/// linear op or that exllamav3 keeps dense: the router (pad_to = 1, §1.1), MLA's kv_b_proj (the
/// attention kernel reads it directly), the head (head_bits 16), the vision tower and the MTP
/// layer (no plan runs them yet).
bool quantizes(const glm53::WeightInfo &w, bool expertsOnly) {
  if (w.role != glm53::WeightRole::Linear || w.isMtp) {
    return false;
  }
  if (expertsOnly) {
    return w.component == glm53::Component::RoutedExpert;
  }
  switch (w.component) {
  case glm53::Component::Router:
  case glm53::Component::Head:
  case glm53::Component::Vision:
  case glm53::Component::Embedding:
    return false;
  default:
    break;
  }
  constexpr std::string_view kvB = "kv_b_proj.weight";
  return !(w.name.size() >= kvB.size() && w.name.substr(w.name.size() - kvB.size()) == kvB);
}

Status writeText(const fs::path &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return out ? Status::success() : ioError(path.string(), ": write failed");
}

/// One weight to quantize; its result lives from the trellis fill to the svh fill.
struct Job {
  const glm53::WeightInfo *info;
  const TensorView *source;
  uint64_t seed;
  std::shared_ptr<kernels::Exl3Quantized> result;
};

struct Options {
  fs::path modelDir, outDir;
  int bits = 4;
  Exl3Codebook codebook = Exl3Codebook::Mcg;
  bool expertsOnly = false;
  uint64_t seed = 0;
};

Status quantizeCheckpoint(const Options &o) {
  GLM_ASSIGN_OR_RETURN(glm53::Glm53Config config, glm53::loadGlm53Config(o.modelDir));
  if (config.quantMethod) {
    return invalidArgument((o.modelDir / "config.json").string(),
                           ": the checkpoint is already quantized (quantization_config."
                           "quant_method is '",
                           *config.quantMethod, "'); quantize a dense bf16 checkpoint");
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::open(o.modelDir));
  const std::vector<glm53::WeightInfo> table = glm53::glm53Weights(config);
  GLM_RETURN_IF_ERROR(
      glm53::checkpointMismatch(glm53::checkCheckpoint(table, *checkpoint), o.modelDir));
  std::error_code ec;
  if (fs::exists(o.outDir, ec) && fs::equivalent(o.outDir, o.modelDir, ec)) {
    return invalidArgument("-o ", o.outDir.string(), " is the input directory");
  }
  fs::create_directories(o.outDir, ec);
  if (ec) {
    return ioError(o.outDir.string(), ": cannot create directory: ", ec.message());
  }

  // The tensors in table order: quantized layers as trellis, suh, svh and marker; the rest copied.
  std::vector<TensorSpec> specs;
  int64_t totalTiles = 0, quantizedWeights = 0;
  uint64_t quantizedBytes = 0;
  OrderedJson storage = OrderedJson::object();
  std::unique_ptr<ProgressReporter> progress;
  auto failure = std::make_shared<Status>();
  for (const glm53::WeightInfo &w : table) {
    const TensorView *source = checkpoint->find(w.name);
    if (!quantizes(w, o.expertsOnly)) {
      specs.push_back({w.name, source->dtype, source->shape, [source](std::span<uint8_t> out) {
                         std::memcpy(out.data(), source->data, out.size());
                       }});
      continue;
    }
    const int64_t out = w.shape[0], in = w.shape[1];
    const int64_t k = exl3Padded(in), n = exl3Padded(out);
    totalTiles += (k / 16) * (n / 16);
    quantizedWeights += out * in;
    auto job = std::make_shared<Job>(
        Job{&w, source, Fnv1a64().add(w.name).add(std::to_string(o.seed)).value(), nullptr});
    const std::string key = exl3ModuleKey(w.name);
    Exl3LayerSpec layer{key, k, n, o.bits, o.codebook, nullptr, nullptr, nullptr};
    layer.trellis = [job, &o, &progress, failure](std::span<uint8_t> bytes) {
      const glm53::WeightInfo &info = *job->info;
      std::vector<float> dense(static_cast<size_t>(info.numel()));
      weightViewOf(*job->source).loadAll(dense.data());
      kernels::Exl3QuantizeOptions options;
      options.bits = o.bits;
      options.codebook = o.codebook;
      options.seed = job->seed;
      options.onTiles = [&progress](int64_t tiles) {
        progress->advance(static_cast<uint64_t>(tiles));
      };
      Expected<kernels::Exl3Quantized> q =
          kernels::exl3Quantize(dense.data(), info.shape[0], info.shape[1], options);
      if (!q.ok()) {
        // The writer cannot stop mid-file: remember the first failure, write
        // zeros, and fail once the file is closed.
        if (failure->ok()) {
          *failure = q.status().withContext(strCat("tensor '", info.name, "'"));
        }
        std::memset(bytes.data(), 0, bytes.size());
        return;
      }
      job->result = std::make_shared<kernels::Exl3Quantized>(std::move(q).value());
      std::memcpy(bytes.data(), job->result->trellis.data(), bytes.size());
    };
    layer.suh = [job](std::span<uint8_t> bytes) {
      if (job->result) {
        std::memcpy(bytes.data(), job->result->suh.data(), bytes.size());
      }
    };
    layer.svh = [job](std::span<uint8_t> bytes) {
      if (job->result) {
        std::memcpy(bytes.data(), job->result->svh.data(), bytes.size());
      }
      job->result.reset();
    };
    quantizedBytes += exl3StoredBytes(k, n, o.bits);
    storage[key] = appendExl3Layer(layer, specs);
  }
  if (quantizedWeights == 0) {
    return invalidArgument(o.modelDir.string(), ": no weight of this model is quantized",
                           o.expertsOnly ? " (it has no routed experts)" : "");
  }

  ProgressReporter::Options progressOptions;
  progressOptions.label = "quantize " + o.outDir.filename().string() +
                          " (EXL3 K=" + std::to_string(o.bits) + ", tiles)";
  progressOptions.total = static_cast<uint64_t>(totalTiles);
  progress = std::make_unique<ProgressReporter>(std::move(progressOptions));
  GLM_RETURN_IF_ERROR(writeCheckpointShards(o.outDir, specs, 5'000'000'000ull));
  progress->finish();
  GLM_RETURN_IF_ERROR(*failure);

  // config.json: the original with exllamav3's quantization_config (§1.2) at the top level.
  // Read as loadGlm53Config read it above: bounded, depth-limited.
  const fs::path configPath = o.modelDir / "config.json";
  GLM_ASSIGN_OR_RETURN(std::string configText, readConfigJson(configPath));
  GLM_ASSIGN_OR_RETURN(
      OrderedJson root,
      parseUntrustedJson<OrderedJson>(configText, configPath.string(), glm53::kMaxConfigJsonDepth));
  if (!root.is_object()) {
    return invalidArgument((o.modelDir / "config.json").string(), ": not a JSON object");
  }
  // The model-average bits per weight of the quantized layers, suh and svh included.
  const double bits = std::round(static_cast<double>(quantizedBytes) * 8.0 /
                                 static_cast<double>(quantizedWeights) * 100.0) /
                      100.0;
  OrderedJson quantization = exl3QuantizationConfig(
      bits, o.codebook, o.expertsOnly ? "glmc quantize --experts-only" : "glmc quantize");
  root["quantization_config"] = quantization;
  GLM_RETURN_IF_ERROR(writeText(o.outDir / "config.json", root.dump(2) + "\n"));
  OrderedJson details = quantization;
  details["tensor_storage"] = storage;
  GLM_RETURN_IF_ERROR(writeText(o.outDir / "quantization_config.json", details.dump(2) + "\n"));
  return copyCheckpointCompanions(o.modelDir, o.outDir);
}

} // namespace

int runQuantize(const std::vector<std::string> &args) {
  CommandLine cl("glmc quantize", "MODEL_DIR -o OUT_DIR --bits K [options]",
                 "Quantizes a dense checkpoint's linears to EXL3 (exllamav3's layout).");
  cl.option("output", "OUT_DIR", "the checkpoint directory to write")
      .option("bits", "K", "bits per weight, 1 to 8")
      .option("codebook", "3inst|mcg|mul1", "the trellis codebook (default mcg)")
      .option("seed", "S", "the random sign vectors' seed (su, sv)")
      .flag("experts-only", "quantize the routed experts only")
      .positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  if (!cl.get("output")) {
    return cl.fail(invalidArgument("-o OUT_DIR is required"));
  }
  Expected<std::optional<int64_t>> bits = cl.getInt("bits", kExl3MinBits, kExl3MaxBits);
  if (!bits.ok()) {
    return cl.fail(bits.status());
  }
  if (!*bits) {
    return cl.fail(invalidArgument("--bits K (1..8, bits per weight) is required"));
  }
  Expected<std::optional<int64_t>> seed = cl.getInt("seed", 0, INT64_MAX);
  if (!seed.ok()) {
    return cl.fail(seed.status());
  }
  Options o;
  o.modelDir = cl.positionals()[0];
  o.outDir = *cl.get("output");
  o.bits = static_cast<int>(**bits);
  o.seed = static_cast<uint64_t>(seed->value_or(0));
  o.expertsOnly = cl.has("experts-only");
  const std::string codebook = cl.get("codebook").value_or("mcg");
  std::optional<Exl3Codebook> parsed = parseExl3Codebook(codebook);
  if (!parsed) {
    return cl.fail(invalidArgument("--codebook is 3inst, mcg or mul1, got '", codebook, "'"));
  }
  o.codebook = *parsed;
  if (Status status = quantizeCheckpoint(o); !status.ok()) {
    return cl.fail(status);
  }
  return 0;
}

} // namespace glm::tools
