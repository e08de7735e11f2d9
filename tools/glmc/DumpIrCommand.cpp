// `glmc dump-ir`: prints a model's glm IR at a compiler stage, in text that glm-opt parses back.
#include "compiler/transforms/Passes.h"
#include "models/glm53/Builder.h"
#include "models/glm53/Config.h"
#include "runtime/weights/SafeTensors.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <sstream>

namespace glm::tools {
namespace {

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
      return invalidArgument("glmc dump-ir: --decode takes BxR[,BxR...], got '", item, "'");
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
      return invalidArgument("glmc dump-ir: --prefill takes C[,C...] chunk sizes, got '", item,
                             "'");
    }
    shapes.push_back({glm53::ProgramShape::Kind::Prefill, 1, c});
  }
  return shapes;
}

/// How the checkpoint stores each tensor: from its safetensors header when weights are present,
/// else from --assume-weights.
Expected<glm53::WeightFormatFn> weightFormats(const std::string &modelDir,
                                              const std::optional<std::string> &assume) {
  if (Checkpoint::hasWeights(modelDir)) {
    if (assume) {
      return invalidArgument("glmc dump-ir: --assume-weights is for a config.json without "
                             "weights; ",
                             modelDir, " has weights");
    }
    GLM_ASSIGN_OR_RETURN(std::shared_ptr<Checkpoint> checkpoint, Checkpoint::open(modelDir));
    return glm53::WeightFormatFn([checkpoint](const glm53::WeightInfo &w) {
      const TensorView *t = checkpoint->find(w.name);
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
    });
  }
  const std::string mode = assume.value_or("bf16");
  if (mode == "bf16") {
    return glm53::WeightFormatFn();
  }
  if (mode.rfind("exl3-experts:", 0) == 0) {
    const std::string bits = mode.substr(13);
    if (bits.size() != 1 || bits[0] < '1' || bits[0] > '8') {
      return invalidArgument("glmc dump-ir: --assume-weights exl3-experts:K takes K in 1..8, got '",
                             bits, "'");
    }
    return glm53::WeightFormatFn([](const glm53::WeightInfo &w) {
      if (w.component == glm53::Component::RoutedExpert) {
        return ir::WeightFormat::EXL3;
      }
      return w.releaseDType == DType::F32 ? ir::WeightFormat::F32 : ir::WeightFormat::BF16;
    });
  }
  return invalidArgument("glmc dump-ir: --assume-weights is bf16 or exl3-experts:K, got '", mode,
                         "'");
}

} // namespace

int runDumpIr(const std::vector<std::string> &args) {
  CommandLine cl("dump-ir");
  cl.option("stage").option("tp").option("target").option("decode").option("prefill");
  cl.option("assume-weights").positional(1, 1);
  auto fail = [](const Status &s) {
    std::fprintf(stderr, "glmc dump-ir: %s\n", s.toString().c_str());
    return 1;
  };
  if (Status s = cl.parse(args); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  const std::string stage = cl.get("stage").value_or("model");
  if (stage != "model" && stage != "partitioned") {
    // The fusion and plan stages come with their passes.
    return fail(unimplemented("stage '", stage,
                              "' is not built yet; this build prints 'model' and 'partitioned'"));
  }
  Expected<std::optional<int64_t>> tp = cl.getInt("tp", 1, 64);
  if (!tp.ok()) {
    return fail(tp.status());
  }
  const std::string modelDir = cl.positionals()[0];
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(modelDir);
  if (!config.ok()) {
    return fail(config.status());
  }
  std::vector<glm53::ProgramShape> programs;
  for (auto [option, parse] :
       {std::pair{"decode", &parseDecodeShapes}, std::pair{"prefill", &parsePrefillShapes}}) {
    if (std::optional<std::string> text = cl.get(option)) {
      Expected<std::vector<glm53::ProgramShape>> shapes = parse(*text);
      if (!shapes.ok()) {
        return fail(shapes.status());
      }
      programs.insert(programs.end(), shapes->begin(), shapes->end());
    }
  }
  if (programs.empty()) {
    programs = {{glm53::ProgramShape::Kind::Decode, 1, 1},
                {glm53::ProgramShape::Kind::Prefill, 1, 512}};
  }
  Expected<glm53::WeightFormatFn> formats = weightFormats(modelDir, cl.get("assume-weights"));
  if (!formats.ok()) {
    return fail(formats.status());
  }

  mlir::MLIRContext context;
  auto module = glm53::buildGlm53Module(context, *config, programs, *formats);
  if (!module.ok()) {
    return fail(module.status());
  }
  if (stage == "partitioned") {
    mlir::PassManager pm(&context);
    pm.addPass(compiler::createGlmPartitionTpPass({tp->value_or(2)}));
    if (mlir::failed(pm.run(**module))) {
      return fail(invalidArgument("the model does not partition across ", tp->value_or(2),
                                  " ranks (see the diagnostics above)"));
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
