// `glmc dump-ir`: prints a model's glm IR at a compiler stage, in text that glm-opt parses back.
#include "compiler/Passes.h"
#include "compiler/pipelines/CompilePipeline.h"
#include "models/glm53/Builder.h"
#include "models/glm53/Config.h"
#include "runtime/weights/SafeTensors.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/ModelInputs.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <sstream>

namespace glm::tools {

int runDumpIr(const std::vector<std::string> &args) {
  CommandLine cl("glmc dump-ir", "MODEL_DIR [options]",
                 "Prints the model's glm IR at a compiler stage, in text that glm-opt parses "
                 "back.");
  cl.option("stage", "model|partitioned|fused|plan", "the stage to print (default model)");
  addCompileShapeOptions(cl);
  cl.positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  const std::string stage = cl.get("stage").value_or("model");
  if (stage != "model" && stage != "partitioned" && stage != "fused" && stage != "plan") {
    return cl.fail(
        invalidArgument("--stage is model, partitioned, fused or plan, got '", stage, "'"));
  }
  Expected<std::optional<int64_t>> tp = cl.getInt("tp", 1, 64);
  if (!tp.ok()) {
    return cl.fail(tp.status());
  }
  const std::string modelDir = cl.positionals()[0];
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(modelDir);
  if (!config.ok()) {
    return cl.fail(config.status());
  }
  Expected<std::vector<glm53::ProgramShape>> requested = programsFromOptions(cl);
  if (!requested.ok()) {
    return cl.fail(requested.status());
  }
  std::vector<glm53::ProgramShape> programs = *requested;
  if (programs.empty()) {
    programs = {{glm53::ProgramShape::Kind::Decode, 1, 1},
                {glm53::ProgramShape::Kind::Prefill, 1, 512}};
  }
  Expected<bool> lastRow = compiler::parsePrefillLogits(cl.get("prefill-logits").value_or("last"));
  if (!lastRow.ok()) {
    return cl.fail(lastRow.status());
  }
  for (glm53::ProgramShape &p : programs) {
    p.lastRowLogits = p.kind == glm53::ProgramShape::Kind::Prefill && *lastRow;
  }
  Expected<WeightFormats> formats = weightFormats(modelDir, cl.get("assume-weights"));
  if (!formats.ok()) {
    return cl.fail(formats.status());
  }

  Expected<bool> mtp = mtpFromOptions(cl, *config);
  if (!mtp.ok()) {
    return cl.fail(mtp.status());
  }

  mlir::MLIRContext context;
  auto module = glm53::buildGlm53Module(context, *config, programs, formats->formatOf, *mtp);
  if (!module.ok()) {
    return cl.fail(module.status());
  }
  if (stage == "partitioned" || stage == "fused") {
    mlir::PassManager pm(&context);
    pm.addPass(compiler::createGlmPartitionTpPass({tp->value_or(2)}));
    if (stage == "fused") {
      // glmc compile's dense formats for the target (a GPU's defaults quantize).
      compiler::CompileOptions options;
      options.target = cl.get("target").value_or(options.target);
      options.dense = cl.get("dense").value_or("");
      options.head = cl.get("head").value_or("");
      const auto [dense, head] = compiler::denseDefaults(options);
      pm.addPass(compiler::createGlmChooseDenseFormatsPass({dense, head}));
      compiler::addFusionPasses(pm);
    }
    if (mlir::failed(pm.run(**module))) {
      return cl.fail(invalidArgument("the model does not partition across ", tp->value_or(2),
                                     " ranks (see the diagnostics above)"));
    }
  } else if (stage == "plan") {
    // The whole pipeline up to the plan file, with glmc compile's defaults.
    compiler::CompileOptions options;
    options.tp = tp->value_or(options.tp);
    options.target = cl.get("target").value_or(options.target);
    options.exl3Bits = formats->exl3Bits;
    options.dense = cl.get("dense").value_or("");
    options.head = cl.get("head").value_or("");
    if (Status fusions = fusionsFromOptions(cl, options); !fusions.ok()) {
      return cl.fail(fusions);
    }
    mlir::PassManager pm(&context);
    compiler::buildCompilePipeline(pm, options);
    if (mlir::failed(pm.run(**module))) {
      return cl.fail(invalidArgument("the plan pipeline failed (see the diagnostics above)"));
    }
  }
  mlir::OpPrintingFlags flags;
  // Locations carry the value names (blk.<L>.<block>.<name>), so they are always printed.
  flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  flags.printNameLocAsPrefix(true);
  (*module)->print(llvm::outs(), flags);
  llvm::outs() << "\n";
  return 0;
}

} // namespace glm::tools
