// `glmc serve`: the OpenAI-compatible server over a plan (the CPU backend, for now).
#include "models/glm53/Config.h"
#include "runtime/engine/LockstepEngine.h"
#include "runtime/engine/Scheduler.h"
#include "server/chat/ChatPrompt.h"
#include "server/http/HttpServer.h"
#include "server/tokenizer/Tokenizer.h"
#include "tools/glmc/AblateOption.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/OpenEngine.h"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

namespace glm::tools {

int runServe(const std::vector<std::string> &args) {
  CommandLine cl("glmc serve", "PLAN.glmp --model DIR [options]",
                 "The OpenAI-compatible server, for CPU and GPU plans. A plan compiled with --tp N "
                 "> 1 runs its ranks\nas threads of this process (a GPU plan's one per GPU over "
                 "NCCL, or all on one GPU), or with\n--tp-listen takes `glmc worker` ranks "
                 "1..N-1: until all join, requests get 503 and /health\nnames the missing ranks.");
  cl.option("model", "DIR", "the checkpoint the plan was compiled from")
      .option("host", "H", "the address to listen on (default 127.0.0.1)")
      .option("port", "P", "the port to listen on (default 8888)")
      .option("api-key", "K", "require `Authorization: Bearer K` on the API")
      .option("served-name", "NAME", "the model name /v1/models reports")
      .option("max-waiting", "N", "requests queued beyond the running ones before 503")
      .option("tp-listen", "HOST:PORT", "rank 0 runs here and takes worker ranks at HOST:PORT")
      .option("tp-timeout", "S",
              "seconds a worker may be busy before the call in flight fails\n(default 30; a "
              "silent worker fails it after 5 s)")
      .option("tp-transport", "nccl|tcp",
              "how a GPU plan's ranks exchange: NCCL, one GPU each (default), or\nhost memory "
              "over the workers' connections (no NCCL, ranks may share a GPU, slow)");
  addAblateOptions(cl);
  cl.positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  if (!cl.get("model")) {
    return cl.fail(invalidArgument("--model DIR is required"));
  }
  const std::string modelDir = *cl.get("model");
  Expected<std::optional<int64_t>> port = cl.getInt("port", 0, 65535);
  Expected<std::optional<int64_t>> maxWaiting = cl.getInt("max-waiting", 1, 1 << 20);
  if (!port.ok() || !maxWaiting.ok()) {
    return cl.fail(!port.ok() ? port.status() : maxWaiting.status());
  }

  // Block the stop signals in every thread; one thread waits for them and stops the server.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGTERM);
  sigaddset(&stopSignals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);

  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(modelDir);
  if (!config.ok()) {
    return cl.fail(config.status());
  }
  Expected<std::optional<Ablation>> ablation = ablationFromOptions(cl, *config);
  if (!ablation.ok()) {
    return cl.fail(ablation.status());
  }
  runtime::CpuEngineOptions engineOptions;
  if (*ablation) {
    engineOptions.weights.ablation = &**ablation;
  }
  Expected<server::Tokenizer> tokenizer = server::Tokenizer::fromModelDir(modelDir);
  if (!tokenizer.ok()) {
    return cl.fail(tokenizer.status());
  }
  Expected<server::ChatTemplate> chatTemplate = server::loadChatTemplate(modelDir);
  if (!chatTemplate.ok()) {
    return cl.fail(chatTemplate.status());
  }
  Expected<server::ChatTokenizerConfig> tokenizerConfig = server::loadChatTokenizerConfig(modelDir);
  if (!tokenizerConfig.ok()) {
    return cl.fail(tokenizerConfig.status());
  }
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(cl.positionals()[0]);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  const int64_t maxContext = (*plan)->root().state_pool()
                                 ? static_cast<int64_t>((*plan)->root().state_pool()->max_context())
                                 : 0;
  Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(modelDir);
  if (!checkpoint.ok()) {
    return cl.fail(checkpoint.status());
  }
  // A TP N plan runs its ranks as threads of this process, or, with --tp-listen, rank 0 here and
  // ranks 1..N-1 in `glmc worker` processes that join there.
  const int tp = static_cast<int>((*plan)->root().tp());
  const std::optional<std::string> tpListen = cl.get("tp-listen");
  if (cl.get("tp-timeout") && !tpListen) {
    return cl.fail(invalidArgument("--tp-timeout bounds the waits of --tp-listen's workers: it "
                                   "needs --tp-listen"));
  }
  Expected<std::optional<int64_t>> tpTimeout =
      cl.getInt("tp-timeout", kMinTpTimeoutS, kMaxTpTimeoutS);
  if (!tpTimeout.ok()) {
    return cl.fail(tpTimeout.status());
  }
  if (cl.get("tp-transport") && !tpListen) {
    return cl.fail(invalidArgument("--tp-transport says how --tp-listen's GPU ranks exchange: it "
                                   "needs --tp-listen"));
  }
  Expected<runtime::DeviceTransport> transport =
      runtime::parseDeviceTransport(cl.get("tp-transport").value_or("nccl"));
  if (!transport.ok()) {
    return cl.fail(transport.status().withContext("--tp-transport"));
  }
  Expected<std::unique_ptr<runtime::Engine>> engine =
      tpListen ? openLockstepEngine(std::move(plan).value(), **checkpoint, *tpListen,
                                    tpTimeoutOption(*tpTimeout), *transport, engineOptions.weights)
               : openEngine(std::move(plan).value(), **checkpoint, engineOptions);
  if (!engine.ok()) {
    return cl.fail(engine.status());
  }
  if (auto *lockstep = dynamic_cast<runtime::LockstepEngine *>(engine->get());
      lockstep != nullptr && tpListen) {
    // The bound port, which --tp-listen HOST:0 leaves to the system.
    const bool gpu = lockstep->plan().target()->arch() != plan::Arch::Cpu;
    std::printf(
        "glmc serve: tensor-parallel rank 0 of %d%s; workers join on port %d\n", tp,
        gpu ? strCat(" (device collectives over ", deviceTransportName(*transport), ")").c_str()
            : "",
        lockstep->port());
  }
  runtime::Scheduler scheduler(std::move(engine).value(), maxWaiting->value_or(64));

  server::ServerOptions options;
  options.host = cl.get("host").value_or("127.0.0.1");
  options.port = static_cast<int>(port->value_or(8888));
  if (std::optional<std::string> key = cl.get("api-key")) {
    options.apiKeys = {*key};
  }
  options.servedNames = {
      cl.get("served-name")
          .value_or(std::filesystem::path(modelDir).lexically_normal().filename().string())};
  options.maxContext = maxContext;
  server::ServedModel model{
      &*tokenizer, &*chatTemplate, *tokenizerConfig,
      std::vector<int32_t>(config->eosTokenIds.begin(), config->eosTokenIds.end())};
  server::HttpServer http(options, scheduler, model);
  Expected<int> bound = http.bind();
  if (!bound.ok()) {
    return cl.fail(bound.status());
  }
  if (options.host != "127.0.0.1" && options.host != "localhost" && options.apiKeys.empty()) {
    std::fprintf(stderr, "glmc serve: warning: listening on %s without --api-key\n",
                 options.host.c_str());
  }
  std::printf("glmc serve: ready on http://%s:%d, model '%s' (%lld tokens of context)\n",
              options.host.c_str(), *bound, options.servedNames.front().c_str(),
              static_cast<long long>(maxContext));
  std::printf("  curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' "
              "-d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": "
              "\"Hello!\"}], \"max_tokens\": 32}'\n",
              options.host.c_str(), *bound, options.servedNames.front().c_str());
  std::fflush(stdout);
  std::thread signals([&] {
    int signal = 0;
    sigwait(&stopSignals, &signal);
    std::fprintf(stderr, "glmc serve: stopping (signal %d)\n", signal);
    http.stop();
  });
  http.serve();
  // serve() also returns if the listener fails; wake the signal thread so it can be joined.
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  return 0;
}

} // namespace glm::tools
