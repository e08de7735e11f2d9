// glmc: the command-line entry point; dispatches to one subcommand.
#include "tools/glmc/Commands.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

struct Subcommand {
  const char *name;
  const char *synopsis;
  const char *summary;
  int (*run)(const std::vector<std::string> &);
};

// One line each; `glmc <command> --help` lists a command's options (declared with the options
// themselves, tools/glmc/CommandLine.h).
const Subcommand kSubcommands[] = {
    {"info", "info MODEL_DIR", "config summary, parameters, bytes/token, checkpoint check",
     glm::tools::runInfo},
    {"synth", "synth --preset P -o DIR", "a random-weight checkpoint in the Hub layout",
     glm::tools::runSynth},
    {"render-chat", "render-chat --model DIR REQUEST.json", "the prompt a chat request becomes",
     glm::tools::runRenderChat},
    {"tokenize", "tokenize --model DIR", "JSON strings in, token id arrays out",
     glm::tools::runTokenize},
    {"generate", "generate PLAN --model DIR --prompt TEXT", "one reply from a CPU or GPU plan",
     glm::tools::runGenerate},
    {"serve", "serve PLAN --model DIR", "the OpenAI-compatible server", glm::tools::runServe},
    {"worker", "worker PLAN --model DIR --rank R --head HOST:PORT", "a tensor-parallel rank",
     glm::tools::runWorker},
    {"up", "up MODEL_DIR --worker HOST | status | logs | stop", "two machines, one command: LIVE",
     glm::tools::runUp},
    {"quantize", "quantize MODEL_DIR -o OUT_DIR --bits K", "EXL3 from a dense checkpoint",
     glm::tools::runQuantize},
    {"dequantize", "dequantize MODEL_DIR -o OUT_DIR", "EXL3 to the dense bf16 equivalent",
     glm::tools::runDequantize},
    {"inspect", "inspect PLAN", "programs, arenas, kernels, collectives, bytes",
     glm::tools::runInspect},
    {"bench", "bench PLAN --model DIR", "replayed-graph latency per program and its roofline",
     glm::tools::runBench},
#ifdef GLM_HAVE_COMPILER
    {"compile", "compile MODEL_DIR -o PLAN [--target T]", "an execution plan",
     glm::tools::runCompile},
    {"dump-ir", "dump-ir MODEL_DIR [--stage S]", "the model's glm IR at a compiler stage",
     glm::tools::runDumpIr},
#endif
};

void printUsage(FILE *out) {
  std::fprintf(out, "usage: glmc <command> [arguments]\n\ncommands:\n");
  for (const Subcommand &c : kSubcommands) {
    std::fprintf(out, "  %-50s %s\n", c.synopsis, c.summary);
  }
  std::fprintf(out, "\n`glmc <command> --help` lists a command's options.\n");
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    printUsage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    printUsage(stdout);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Subcommand &c : kSubcommands) {
    if (command == c.name) {
      // Errors travel as Status; an exception here is a bug (a library's, or glmc's), reported as
      // one instead of an abort.
      try {
        return c.run(args);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "glmc %s: internal error: %s\n", c.name, e.what());
      } catch (...) {
        std::fprintf(stderr, "glmc %s: internal error: an unknown exception\n", c.name);
      }
      return 1;
    }
  }
  std::fprintf(stderr, "glmc: unknown command '%s'\n\n", command.c_str());
  printUsage(stderr);
  return 2;
}
