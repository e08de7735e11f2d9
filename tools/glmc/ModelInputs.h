// What the compiling subcommands (dump-ir, compile) read from their command line and model
// directory: program shapes and each weight's storage format.
#pragma once

#include "base/Status.h"
#include "models/glm53/Builder.h"
#include "tools/glmc/CommandLine.h"

#include <optional>
#include <string>
#include <vector>

namespace glm::compiler {
struct CompileOptions;
} // namespace glm::compiler

namespace glm::tools {

/// Declares the options the compiling subcommands share: --target, --tp, --decode, --prefill,
/// --prefill-logits, --assume-weights, --dense, --head, --mtp and the fusion switches below.
void addCompileShapeOptions(CommandLine &cl);

/// "4x1,1x8" -> decode programs {B=4, R=1}, {B=1, R=8}.
Expected<std::vector<glm53::ProgramShape>> parseDecodeShapes(const std::string &text);
/// "512,2048" -> prefill chunks of 512 and 2048 tokens.
Expected<std::vector<glm53::ProgramShape>> parsePrefillShapes(const std::string &text);
/// The programs --decode and --prefill ask for (empty when neither is given).
Expected<std::vector<glm53::ProgramShape>> programsFromOptions(const CommandLine &cl);
/// Whether the programs carry the MTP head: --mtp on|off, by default where the checkpoint has the
/// layer; "on" for a checkpoint without it is refused.
Expected<bool> mtpFromOptions(const CommandLine &cl, const glm53::Glm53Config &config);
/// The optional fusion passes, on unless turned off: --group-linears on|off (plan-group-linears),
/// --group-short-convs on|off (plan-group-short-convs), --fuse-mhc on|off (plan-fuse-mhc),
/// --fuse-mhc-norm on|off (plan-fuse-mhc-norm), --fuse-kda-norm on|off (plan-fuse-kda-norm) and
/// --fuse-linear-add on|off (plan-fuse-linear-add).
Status fusionsFromOptions(const CommandLine &cl, compiler::CompileOptions &options);

/// How the checkpoint stores each tensor: from the safetensors headers when the directory has
/// weights, else from `assume` ("bf16", the default, or "exl3-experts:K"). Also returns K, the
/// EXL3 bits (4 when not EXL3).
struct WeightFormats {
  glm53::WeightFormatFn formatOf;
  int64_t exl3Bits = 4;
};
Expected<WeightFormats> weightFormats(const std::string &modelDir,
                                      const std::optional<std::string> &assume);

} // namespace glm::tools
