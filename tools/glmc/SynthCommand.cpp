// `glmc synth`: writes a random-weight GLM-5.3 checkpoint.
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/synth/Synth.h"

#include <cstdio>

namespace glm::tools {

int runSynth(const std::vector<std::string> &args) {
  CommandLine cl("glmc synth", "--preset tiny|glm53-flash -o DIR [options]",
                 "Writes a random-weight checkpoint in the Hub layout.");
  cl.option("preset", "tiny|glm53-flash", "the config to synthesize")
      .option("output", "DIR", "the checkpoint directory to write")
      .option("layers", "N", "trunk layers (default: the preset's)")
      .option("seed", "S", "the weights' seed")
      .option("experts", "bf16|exl3", "routed experts in bf16 or as random EXL3 trellises")
      .option("bits", "K", "the EXL3 experts' bits (default 4; MCG codebook)")
      .option("dense", "bf16|fp8", "dense linears in bf16 or e4m3 with 128 x 128 block scales")
      .flag("config-only", "everything but the weights (for glmc compile --assume-weights\n"
                           "where the checkpoint will not be held)")
      .positional(0, 0);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  Status status;
  glm53::SynthOptions options;
  if (!cl.get("preset")) {
    status = invalidArgument("glmc synth: --preset is required (tiny or glm53-flash)");
  }
  if (status.ok() && !cl.get("output")) {
    status = invalidArgument("glmc synth: -o DIR is required");
  }
  if (status.ok()) {
    options.preset = *cl.get("preset");
    options.outDir = *cl.get("output");
    options.experts = cl.get("experts").value_or("bf16");
    options.dense = cl.get("dense").value_or("bf16");
    auto layers = cl.getInt("layers", 1, 1024);
    auto seed = cl.getInt("seed", 0, INT64_MAX);
    auto bits = cl.getInt("bits", 1, 8);
    if (!layers.ok()) {
      status = layers.status();
    } else if (!seed.ok()) {
      status = seed.status();
    } else if (!bits.ok()) {
      status = bits.status();
    } else if (bits->has_value() && options.experts != "exl3") {
      status = invalidArgument("--bits sets the EXL3 experts' bits: it needs --experts exl3");
    } else {
      options.exl3Bits = static_cast<int>(bits->value_or(4));
      options.layers = *layers;
      options.seed = static_cast<uint64_t>(seed->value_or(0));
      options.configOnly = cl.has("config-only");
      status = glm53::synthesizeCheckpoint(options);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "glmc synth: %s\n", status.toString().c_str());
    return 1;
  }
  return 0;
}

} // namespace glm::tools
