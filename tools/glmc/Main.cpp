// glmc: the command-line entry point; dispatches to one subcommand.
#include "tools/glmc/Commands.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Subcommand {
  const char *name;
  const char *usage;
  int (*run)(const std::vector<std::string> &);
};

const Subcommand kSubcommands[] = {
    {"info", "info MODEL_DIR [--json]   config summary, parameters, bytes/token, checkpoint check",
     glm::tools::runInfo},
    {"synth",
     "synth --preset tiny|glm53-flash [--layers N] [--seed S] [--experts bf16|exl3 [--bits K]]\n"
     "        [--dense bf16|fp8] -o DIR   a random-weight checkpoint in the Hub layout (EXL3\n"
     "                            experts: random trellises at K bits, MCG codebook; fp8: the\n"
     "                            dense linears in e4m3 with 128 x 128 block scales)",
     glm::tools::runSynth},
    {"render-chat",
     "render-chat --model DIR REQUEST.json\n"
     "                            the prompt text the server would build for a chat request",
     glm::tools::runRenderChat},
    {"tokenize",
     "tokenize --model DIR [--decode]   JSON strings in -> JSON id arrays out, one per line\n"
     "                            (--decode: id arrays in -> strings out)",
     glm::tools::runTokenize},
    {"generate",
     "generate PLAN.glmp --model DIR (--prompt TEXT | --chat TEXT | --prompt-ids FILE)\n"
     "        [--max-tokens N] [--greedy | --temperature T --top-p P --top-k K --min-p M --seed "
     "S]\n"
     "        [--prefill-chunks a,b,...] [--dump-logits OUT.safetensors]\n"
     "        [--dump-tensors GLOBS (or GLM_DUMP) --dump-dir DIR]   runs CPU and GPU plans\n"
     "        [--ablate DIR_FILE [--ablate-layers A-B] [--ablate-alpha X] [--ablate-mtp]]\n"
     "                                  (generate, serve, worker) a direction (safetensors, one\n"
     "                                  hidden_size vector) projected out of the attention output\n"
     "                                  projections of layers A-B (default 15 to the last) at\n"
     "                                  load, W -= alpha d (d^T W), alpha default 3.0",
     glm::tools::runGenerate},
    {"serve",
     "serve PLAN.glmp --model DIR [--host H] [--port 8888] [--api-key K] [--served-name NAME]\n"
     "        [--max-waiting N] [--tp-listen HOST:PORT [--tp-timeout S] [--tp-transport "
     "nccl|tcp]]\n"
     "        [--ablate DIR_FILE ...] (as generate)\n"
     "        the OpenAI-compatible server (CPU and GPU plans); a plan compiled with --tp N > 1 "
     "runs its\n"
     "        ranks as threads of this process (a GPU plan's one per GPU over NCCL, or all on one "
     "GPU);\n"
     "        with --tp-listen, rank 0 runs here (GPU 0) and takes `glmc worker` ranks 1..N-1 "
     "(requests\n"
     "        get 503 and /health names the missing ranks until all join; a worker silent for 5 "
     "s, or busy\n"
     "        for --tp-timeout seconds, default 30, fails the call in flight); a GPU plan's "
     "ranks\n"
     "        exchange over NCCL, one GPU each (nccl, the default), or through host memory "
     "over the\n"
     "        workers' connections (--tp-transport tcp: no NCCL needed, ranks may share a GPU, "
     "slow)",
     glm::tools::runServe},
    {"worker",
     "worker PLAN.glmp --model DIR --rank R --head HOST:PORT [--wait SECONDS] [--tp-timeout S]\n"
     "        [--device N] [--ablate DIR_FILE ...] (as serve)   tensor-parallel rank R of a --tp "
     "N plan: joins `glmc serve "
     "--tp-listen` at\n"
     "        HOST:PORT (same plan and checkpoint required), runs its calls in lockstep (a GPU "
     "plan on\n"
     "        CUDA device N, default 0), rejoins when dropped; exits when rank 0 cannot be "
     "reached for\n"
     "        --wait seconds (default 300) or this rank cannot set up the group's transport",
     glm::tools::runWorker},
    {"quantize",
     "quantize MODEL_DIR -o OUT_DIR --bits K [--codebook 3inst|mcg|mul1] [--experts-only]\n"
     "        [--seed S]   EXL3 (exllamav3 layout) from a dense checkpoint, K in 1..8",
     glm::tools::runQuantize},
    {"dequantize", "dequantize MODEL_DIR -o OUT_DIR   EXL3 -> the dense bf16 equivalent",
     glm::tools::runDequantize},
    {"inspect", "inspect PLAN.glmp [--json] [--steps]   programs, arenas, kernels, collectives",
     glm::tools::runInspect},
    {"bench",
     "bench PLAN.glmp --model DIR [--context N] [--reps N] [--json OUT] [--plot OUT.svg]\n"
     "                            replayed-graph latency per program, per-step breakdown, roofline",
     glm::tools::runBench},
#ifdef GLM_HAVE_COMPILER
    {"compile",
     "compile MODEL_DIR -o PLAN.glmp [--target cpu|sm_90a|sm_121a] [--tp N]\n"
     "        [--precision f32|bf16] [--max-seqs N] [--max-context N] [--kv bf16|fp8]\n"
     "        [--assume-weights bf16|exl3-experts:K] [--decode BxR,...] [--prefill C,...]\n"
     "        [--prefill-logits last|all]       prefill logits of each chunk's last row (serving)\n"
     "                                          or of every row (--dump-logits, golden tests)\n"
     "        [--dense bf16|q4|fp8] [--head bf16|q4|fp8]   dense linears and the head quantized "
     "at\n"
     "                                          load (default: q4 and fp8 for GPU bf16 plans, as\n"
     "                                          stored otherwise; docs/quantization.md)",
     glm::tools::runCompile},
    {"dump-ir",
     "dump-ir MODEL_DIR [--stage model|partitioned|fused|plan] [--tp N] [--target T] [--decode "
     "BxR,...] "
     "[--prefill C,...]\n"
     "        [--assume-weights bf16|exl3-experts:K] [--prefill-logits last|all]\n"
     "        [--dense bf16|q4|fp8] [--head bf16|q4|fp8]   the model's glm IR",
     glm::tools::runDumpIr},
#endif
};

void printUsage(FILE *out) {
  std::fprintf(out, "usage: glmc <command> [arguments]\n\ncommands:\n");
  for (const Subcommand &c : kSubcommands) {
    std::fprintf(out, "  %s\n", c.usage);
  }
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
      return c.run(args);
    }
  }
  std::fprintf(stderr, "glmc: unknown command '%s'\n\n", command.c_str());
  printUsage(stderr);
  return 2;
}
