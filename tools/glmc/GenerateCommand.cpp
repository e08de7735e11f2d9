// `glmc generate`: one prompt through a plan on the CPU backend, with the text streamed as it
// comes.
#include "models/glm53/Config.h"
#include "runtime/weights/SafeTensorsWriter.h"
#include "server/chat/ChatPrompt.h"
#include "server/tokenizer/StreamingDetokenizer.h"
#include "server/tokenizer/Tokenizer.h"
#include "tools/glmc/AblateOption.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/OpenEngine.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace glm::tools {
namespace {

Expected<std::vector<int32_t>> readPromptIds(const std::string &path) {
  std::ifstream in(path);
  if (!in) {
    return notFound(path, ": cannot open");
  }
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || ptr != word.data() + word.size() || id < 0) {
      return invalidArgument(path, ": '", word, "' is not a token id");
    }
    ids.push_back(id);
  }
  if (ids.empty()) {
    return invalidArgument(path, ": no token ids");
  }
  return ids;
}

Expected<std::vector<size_t>> parseChunks(const std::string &text, size_t promptLength) {
  std::vector<size_t> ends;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t end = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), end);
    if (ec != std::errc() || ptr != item.data() + item.size() || end == 0 || end > promptLength ||
        (!ends.empty() && end <= ends.back())) {
      return invalidArgument("--prefill-chunks takes increasing positions within the ",
                             promptLength, "-token prompt, got '", item, "'");
    }
    ends.push_back(end);
  }
  if (ends.empty() || ends.back() != promptLength) {
    ends.push_back(promptLength);
  }
  return ends;
}

Expected<float> parseFloat(const CommandLine &cl, const char *name, float fallback) {
  std::optional<std::string> text = cl.get(name);
  if (!text) {
    return fallback;
  }
  char *end = nullptr;
  const float value = std::strtof(text->c_str(), &end);
  if (text->empty() || *end != '\0' || !std::isfinite(value) || value < 0) {
    return invalidArgument("glmc generate: --", name, " must be a non-negative number, got '",
                           *text, "'");
  }
  return value;
}

} // namespace

int runGenerate(const std::vector<std::string> &args) {
  CommandLine cl("glmc generate",
                 "PLAN.glmp --model DIR (--prompt TEXT | --chat TEXT | --prompt-ids FILE) "
                 "[options]",
                 "Runs a CPU or GPU plan on one prompt and prints the reply.");
  cl.option("model", "DIR", "the checkpoint the plan was compiled from")
      .option("prompt", "TEXT", "raw prompt text")
      .option("chat", "TEXT", "one user message, through the checkpoint's chat template")
      .option("prompt-ids", "FILE", "a JSON array of token ids")
      .option("max-tokens", "N", "tokens to generate")
      .flag("greedy", "argmax sampling (the default without --temperature)")
      .option("temperature", "T", "sampling temperature")
      .option("top-p", "P", "nucleus sampling's mass")
      .option("top-k", "K", "sample among the K most likely tokens")
      .option("min-p", "M", "drop tokens below M times the top probability")
      .option("seed", "S", "the sampling key's seed")
      .option("prefill-chunks", "a,b,...", "prefill the prompt in chunks of these sizes")
      .option("dump-logits", "OUT.safetensors", "write every row's logits")
      .option("tie-rule", "lower-index|torch-cpu", "how equal top-k scores are ordered")
      .option("dump-tensors", "GLOBS", "write intermediates by IR name (blk.3.attn.*; or GLM_DUMP)")
      .option("dump-dir", "DIR", "where --dump-tensors writes (default .)");
  cl.positional(1, 1);
  addAblateOptions(cl);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  if (!cl.get("model")) {
    return cl.fail(invalidArgument("--model DIR is required"));
  }
  const std::string modelDir = *cl.get("model");
  const int sources = cl.has("prompt") + cl.has("chat") + cl.has("prompt-ids");
  if (sources != 1) {
    return cl.fail(invalidArgument("give exactly one of --prompt, --chat and --prompt-ids"));
  }
  if (cl.has("greedy") && cl.has("temperature")) {
    return cl.fail(invalidArgument("--greedy and --temperature exclude each other"));
  }
  runtime::SamplingParams sampling;
  Expected<float> temperature = parseFloat(cl, "temperature", 0.0f);
  Expected<float> topP = parseFloat(cl, "top-p", 1.0f);
  Expected<float> minP = parseFloat(cl, "min-p", 0.0f);
  Expected<std::optional<int64_t>> topK = cl.getInt("top-k", 0, 1 << 30);
  Expected<std::optional<int64_t>> seed = cl.getInt("seed", 0, INT64_MAX);
  Expected<std::optional<int64_t>> maxTokens = cl.getInt("max-tokens", 1, 1 << 20);
  for (const Status &s : {temperature.status(), topP.status(), minP.status(), topK.status(),
                          seed.status(), maxTokens.status()}) {
    if (!s.ok()) {
      return cl.fail(s);
    }
  }
  sampling.temperature = *temperature;
  sampling.topP = *topP;
  sampling.minP = *minP;
  sampling.topK = static_cast<int32_t>(topK->value_or(0));
  sampling.seed = static_cast<uint64_t>(seed->value_or(0));
  runtime::CpuEngineOptions options;
  const std::string tieRule = cl.get("tie-rule").value_or("lower-index");
  if (tieRule == "torch-cpu") {
    options.tieRule = kernels::TopkTieRule::TorchCpu;
  } else if (tieRule != "lower-index") {
    return cl.fail(invalidArgument("--tie-rule is lower-index or torch-cpu, got '", tieRule, "'"));
  }

  // Intermediates by IR name (globs over step names, e.g. blk.3.attn.*), from the flag or
  // GLM_DUMP; one safetensors file per program run in --dump-dir (default: the current one).
  if (std::optional<std::string> globs = cl.get("dump-tensors")) {
    options.dumpPattern = *globs;
  } else if (const char *env = std::getenv("GLM_DUMP")) {
    options.dumpPattern = env;
  }
  options.dumpDir = cl.get("dump-dir").value_or(".");
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(modelDir);
  if (!config.ok()) {
    return cl.fail(config.status());
  }
  Expected<std::optional<Ablation>> ablation = ablationFromOptions(cl, *config);
  if (!ablation.ok()) {
    return cl.fail(ablation.status());
  }
  if (*ablation) {
    options.weights.ablation = &**ablation;
  }
  // The tokenizer is needed for text prompts and to print the reply; with --prompt-ids and no
  // tokenizer the reply is printed as ids.
  std::optional<server::Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(modelDir) / "tokenizer.json")) {
    Expected<server::Tokenizer> loaded = server::Tokenizer::fromModelDir(modelDir);
    if (!loaded.ok()) {
      return cl.fail(loaded.status());
    }
    tokenizer.emplace(std::move(loaded).value());
  } else if (!cl.has("prompt-ids")) {
    return cl.fail(notFound(modelDir, "/tokenizer.json: needed to tokenize the prompt"));
  }

  std::vector<int32_t> prompt;
  if (cl.has("prompt-ids")) {
    Expected<std::vector<int32_t>> ids = readPromptIds(*cl.get("prompt-ids"));
    if (!ids.ok()) {
      return cl.fail(ids.status());
    }
    prompt = *ids;
  } else {
    std::string text = cl.get("prompt").value_or("");
    if (cl.has("chat")) {
      Expected<server::ChatTemplate> chatTemplate = server::loadChatTemplate(modelDir);
      Expected<server::ChatTokenizerConfig> tokenizerConfig =
          server::loadChatTokenizerConfig(modelDir);
      if (!chatTemplate.ok() || !tokenizerConfig.ok()) {
        return cl.fail(!chatTemplate.ok() ? chatTemplate.status() : tokenizerConfig.status());
      }
      nlohmann::ordered_json request;
      request["messages"] = {{{"role", "user"}, {"content", *cl.get("chat")}}};
      Expected<std::string> rendered =
          server::renderChatPrompt(*chatTemplate, request, *tokenizerConfig);
      if (!rendered.ok()) {
        return cl.fail(rendered.status());
      }
      text = *rendered;
    }
    Expected<std::vector<server::TokenId>> ids = tokenizer->encode(text);
    if (!ids.ok()) {
      return cl.fail(ids.status());
    }
    prompt.assign(ids->begin(), ids->end());
    if (prompt.empty()) {
      return cl.fail(invalidArgument("the prompt is empty"));
    }
  }
  std::vector<size_t> chunkEnds = {prompt.size()};
  if (std::optional<std::string> chunks = cl.get("prefill-chunks")) {
    Expected<std::vector<size_t>> parsed = parseChunks(*chunks, prompt.size());
    if (!parsed.ok()) {
      return cl.fail(parsed.status());
    }
    chunkEnds = *parsed;
  }

  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(cl.positionals()[0]);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(modelDir);
  if (!checkpoint.ok()) {
    return cl.fail(checkpoint.status());
  }
  Expected<std::unique_ptr<runtime::Engine>> engine =
      openEngine(std::move(plan).value(), **checkpoint, options);
  if (!engine.ok()) {
    return cl.fail(engine.status());
  }
  runtime::Engine &e = **engine;
  const int64_t vocab = e.vocabSize();
  Expected<int> slot = e.newSequence();
  if (!slot.ok()) {
    return cl.fail(slot.status());
  }

  // The engine samples on the device; only the tokens (and, when dumped, the logits) come back.
  // Wall-clock time of the engine calls alone (not printing), reported at the end.
  const bool dumpLogits = cl.has("dump-logits");
  const runtime::RowSampling rowSampling{&sampling, static_cast<int64_t>(prompt.size())};
  using Clock = std::chrono::steady_clock;
  const Clock::time_point prefillStart = Clock::now();
  std::vector<float> prefillLogits;
  runtime::SampledToken next;
  size_t start = 0;
  for (size_t end : chunkEnds) {
    // Every prompt row's logits only when they are dumped.
    std::vector<float> logits;
    Expected<runtime::SampledToken> token =
        e.prefillSample(*slot, std::span(prompt).subspan(start, end - start), rowSampling,
                        dumpLogits ? &logits : nullptr, runtime::LogitRows::All);
    if (!token.ok()) {
      return cl.fail(token.status());
    }
    next = *token;
    prefillLogits.insert(prefillLogits.end(), logits.begin(), logits.end());
    start = end;
  }
  const double prefillMs =
      std::chrono::duration<double, std::milli>(Clock::now() - prefillStart).count();
  double decodeMs = 0;
  int64_t decodeSteps = 0;

  const int64_t limit = maxTokens->value_or(64);
  std::vector<int32_t> generated;
  std::vector<float> decodeLogits;
  std::optional<server::StreamingDetokenizer> detokenizer;
  if (tokenizer) {
    detokenizer.emplace(*tokenizer);
  }
  auto emit = [&](int32_t id) -> Status {
    if (detokenizer) {
      GLM_ASSIGN_OR_RETURN(std::string piece, detokenizer->feed(id));
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    } else {
      std::printf("%s%d", generated.size() > 1 ? " " : "", id);
    }
    std::fflush(stdout);
    return Status::success();
  };
  for (int64_t i = 0; i < limit; ++i) {
    generated.push_back(next.id);
    if (std::find(config->eosTokenIds.begin(), config->eosTokenIds.end(), next.id) !=
        config->eosTokenIds.end()) {
      break;
    }
    if (Status s = emit(next.id); !s.ok()) {
      return cl.fail(s);
    }
    if (i + 1 == limit) {
      break;
    }
    const int slots[] = {*slot};
    const Clock::time_point stepStart = Clock::now();
    std::vector<float> logits;
    Expected<std::vector<runtime::SampledToken>> tokens = e.decodeSample(
        slots, std::span(&generated.back(), 1),
        std::span<const runtime::RowSampling>(&rowSampling, 1), dumpLogits ? &logits : nullptr);
    if (!tokens.ok()) {
      return cl.fail(tokens.status());
    }
    decodeMs += std::chrono::duration<double, std::milli>(Clock::now() - stepStart).count();
    ++decodeSteps;
    decodeLogits.insert(decodeLogits.end(), logits.begin(), logits.end());
    next = tokens->front();
  }
  if (detokenizer) {
    std::string rest = detokenizer->finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  std::fprintf(stderr,
               "glmc generate: prefill of %zu tokens %.1f ms; %lld decode steps %.1f ms (%.3f ms a "
               "step)\n",
               prompt.size(), prefillMs, static_cast<long long>(decodeSteps), decodeMs,
               decodeSteps > 0 ? decodeMs / static_cast<double>(decodeSteps) : 0.0);

  if (std::optional<std::string> dump = cl.get("dump-logits")) {
    auto floats = [](const std::vector<float> &v) {
      return [&v](std::span<uint8_t> out) { std::memcpy(out.data(), v.data(), out.size()); };
    };
    const int64_t decodeRows = static_cast<int64_t>(decodeLogits.size()) / vocab;
    std::vector<TensorSpec> tensors = {
        {"prefill_logits",
         DType::F32,
         {static_cast<int64_t>(prompt.size()), vocab},
         floats(prefillLogits)},
        {"tokens",
         DType::I32,
         {static_cast<int64_t>(generated.size())},
         [&](std::span<uint8_t> out) { std::memcpy(out.data(), generated.data(), out.size()); }},
        {"decode_logits", DType::F32, {decodeRows, vocab}, floats(decodeLogits)},
    };
    if (Status s = writeSafeTensors(*dump, tensors); !s.ok()) {
      return cl.fail(s);
    }
  }
  return 0;
}

} // namespace glm::tools
