// `glmc compile`: a checkpoint (or its config.json alone) into a plan file for a target.
#include "compiler/pipelines/CompilePipeline.h"
#include "compiler/target/Target.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/SafeTensors.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/ModelInputs.h"

#include "mlir/IR/MLIRContext.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace glm::tools {
namespace {

/// The checkpoint check of `glmc info` (glm53::checkCheckpoint), as one error when it fails.
Status checkpointMatches(const glm53::Glm53Config &config, const std::string &modelDir) {
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::open(modelDir));
  return glm53::checkpointMismatch(glm53::checkCheckpoint(glm53::glm53Weights(config), *checkpoint),
                                   modelDir);
}

} // namespace

int runCompile(const std::vector<std::string> &args) {
  CommandLine cl("glmc compile", "MODEL_DIR -o PLAN.glmp [options]",
                 "Lowers the model of a checkpoint (or of its config.json alone) through the glm "
                 "IR to an execution\nplan for a target.");
  cl.option("output", "PLAN.glmp", "the plan file to write");
  addCompileShapeOptions(cl);
  cl.option("precision", "f32|bf16",
            "activation precision (default bf16 on a GPU, f32 on the CPU, whose\nreference "
            "kernels compute in f32)")
      .option("max-seqs", "N", "sequences served at once")
      .option("max-context", "N", "each request's window in tokens (default 131072)")
      .option("pool-tokens", "N",
              "tokens of sparse-attention state the sequences share (default: as\nmany as the "
              "target's memory holds after the host reserve; the CPU:\none window)")
      .option("host-reserve", "BYTES",
              "memory left to the host and server (default sm_121a 12 GiB, sm_90a\n4 GiB)")
      .option("kv", "bf16|fp8", "the sparse-attention latent cache's element type")
      .positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  if (!cl.get("output")) {
    return cl.fail(invalidArgument("-o PLAN.glmp is required"));
  }
  compiler::CompileOptions options;
  options.target = cl.get("target").value_or(options.target);
  if (!compiler::findTarget(options.target)) {
    return cl.fail(
        invalidArgument("--target is cpu, sm_90a or sm_121a, got '", options.target, "'"));
  }
  // A CPU plan is the reference: its kernels compute in f32 and it runs in one process, so it
  // defaults to what the CPU backend runs (a bf16 TP 2 plan, the GB10 deployment, it refuses).
  const bool cpu = options.target == "cpu";
  options.precision = cl.get("precision").value_or(cpu ? "f32" : options.precision);
  if (cpu) {
    options.tp = 1;
  }
  if (options.precision != "f32" && options.precision != "bf16") {
    return cl.fail(invalidArgument("--precision is f32 or bf16, got '", options.precision, "'"));
  }
  Expected<bool> lastRow = compiler::parsePrefillLogits(cl.get("prefill-logits").value_or("last"));
  if (!lastRow.ok()) {
    return cl.fail(lastRow.status());
  }
  options.prefillLastRowLogits = *lastRow;
  for (auto [name, out] : {std::pair{"dense", &options.dense}, std::pair{"head", &options.head}}) {
    *out = cl.get(name).value_or("");
    if (!out->empty() && *out != "bf16" && *out != "q4" && *out != "fp8") {
      return cl.fail(invalidArgument("--", name, " is bf16, q4 or fp8, got '", *out, "'"));
    }
  }
  options.kv = cl.get("kv").value_or(options.kv);
  if (options.kv != "bf16" && options.kv != "fp8") {
    return cl.fail(invalidArgument("--kv is bf16 or fp8, got '", options.kv, "'"));
  }
  for (auto [name, out, max] : {std::tuple{"tp", &options.tp, int64_t(64)},
                                std::tuple{"max-seqs", &options.maxSeqs, int64_t(4096)},
                                std::tuple{"max-context", &options.maxContext, int64_t(1) << 24}}) {
    Expected<std::optional<int64_t>> value = cl.getInt(name, 1, max);
    if (!value.ok()) {
      return cl.fail(value.status());
    }
    if (*value) {
      *out = **value;
    }
  }
  Expected<std::optional<int64_t>> poolTokens = cl.getInt("pool-tokens", 1, int64_t(1) << 32);
  Expected<std::optional<int64_t>> hostReserve = cl.getInt("host-reserve", 0, int64_t(1) << 50);
  for (const auto *value : {&poolTokens, &hostReserve}) {
    if (!value->ok()) {
      return cl.fail(value->status());
    }
  }
  options.poolTokens = poolTokens->value_or(0);
  options.hostReserve = *hostReserve;
  const std::string modelDir = cl.positionals()[0];
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(modelDir);
  if (!config.ok()) {
    return cl.fail(config.status());
  }
  if (options.maxContext > config->maxPositionEmbeddings) {
    return cl.fail(invalidArgument("--max-context ", options.maxContext, " exceeds the model's ",
                                   config->maxPositionEmbeddings, " positions"));
  }
  Expected<std::vector<glm53::ProgramShape>> programs = programsFromOptions(cl);
  if (!programs.ok()) {
    return cl.fail(programs.status());
  }
  options.programs = *programs;
  Expected<bool> mtp = mtpFromOptions(cl, *config);
  if (!mtp.ok()) {
    return cl.fail(mtp.status());
  }
  options.mtp = *mtp;
  if (Status fusions = fusionsFromOptions(cl, options); !fusions.ok()) {
    return cl.fail(fusions);
  }
  Expected<WeightFormats> formats = weightFormats(modelDir, cl.get("assume-weights"));
  if (!formats.ok()) {
    return cl.fail(formats.status());
  }
  options.exl3Bits = formats->exl3Bits;
  // Weights beside config.json must be the model it describes, checked as `glmc info` checks
  // them: a plan compiled for other tensors would only fail when `generate` loads them.
  if (Checkpoint::hasWeights(modelDir)) {
    if (Status matches = checkpointMatches(*config, modelDir); !matches.ok()) {
      return cl.fail(matches);
    }
  }

  mlir::MLIRContext context;
  Expected<std::vector<uint8_t>> plan =
      compiler::compileGlm53Plan(context, *config, formats->formatOf, options);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  // Written whole to a temporary name, then renamed: a failed write leaves no partial plan.
  const std::filesystem::path out = *cl.get("output");
  const std::filesystem::path tmp = out.string() + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char *>(plan->data()),
               static_cast<std::streamsize>(plan->size()));
    if (!file) {
      std::filesystem::remove(tmp);
      return cl.fail(ioError(out.string(), ": write failed"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    return cl.fail(ioError(out.string(), ": ", ec.message()));
  }
  const auto [dense, head] = compiler::denseDefaults(options);
  std::fprintf(
      stderr, "glmc compile: wrote %s (%zu bytes) for %s, TP %lld, %s, dense %s, head %s\n",
      out.string().c_str(), plan->size(), options.target.c_str(),
      static_cast<long long>(options.tp), options.precision.c_str(), dense.c_str(), head.c_str());
  return 0;
}

} // namespace glm::tools
