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
#include "tools/glmc/PlanMemory.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <malloc.h>
#include <pthread.h>
#include <thread>

namespace glm::tools {
namespace {

/// Drafts a window carries by default where the plan verifies wider: past ~15 a copy draft's
/// tail is rarely still right, and a round's cost grows with its rows.
constexpr int64_t kDefaultDraftTokens = 15;

} // namespace

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
      .option("max-waiting", "N",
              "requests queued beyond the running ones (default 4 x the plan's\nsequences); "
              "one more gets 503 server_overloaded with Retry-After")
      .option("kept-states", "N",
              "prompt states kept for prefix reuse (default 4 x the plan's sequences;\n0: "
              "none); each holds a copy of one sequence's KDA and conv state")
      .option("max-connections", "N",
              "open connections at most (default 256); one more gets 503 at once")
      .option("max-client-connections", "N",
              "open connections from one client address at most (default 32); one\nmore gets "
              "429")
      .option("header-timeout", "S",
              "seconds a request's line and headers may take to arrive (default 10);\nlater: "
              "408, and the connection closes")
      .option("body-timeout", "S", "seconds a request's body may take to arrive (default 30)")
      .option("idle-timeout", "S",
              "seconds a kept-alive connection may wait for its next request\n(default 5)")
      .option("max-body-bytes", "N",
              "request bodies at most (default 33554432, 32 MiB); 413 beyond")
      .option("max-body-memory", "N",
              "bytes of request bodies held at once, all connections together\n(default "
              "805306368, 768 MiB); a body beyond gets 503")
      .option("monitor-port", "P",
              "also serve GET /health and /metrics on port P, with connections of\ntheir own "
              "that neither generation nor slow API clients can hold")
      .option("monitor-host", "H", "the monitoring listener's address (default 127.0.0.1)")
      .flag("metrics-open", "serve /metrics without the API key (for scrapers)")
      .option("drain-timeout", "S",
              "on SIGTERM/SIGINT, seconds running requests may take to finish\n(default 30); "
              "then each ends with an error event, its finish_reason and\n[DONE], and the "
              "server exits 0; a second signal exits at once")
      .option("draft-tokens", "N",
              "the most drafted tokens a sequence's verify window carries (default:\nwhat the "
              "plan's widest window holds, at most 15; 0: no speculative\ndecoding); verify "
              "windows are the plan's decode programs BxR, R > 1\n(by default 1x4, 1x8, 1x16 "
              "and Bx4)")
      .option("tp-listen", "HOST:PORT", "rank 0 runs here and takes worker ranks at HOST:PORT")
      .option("tp-transport", "nccl|tcp",
              "how a GPU plan's ranks exchange: NCCL, one GPU each (default), or\nhost memory "
              "over the workers' connections (no NCCL, ranks may share a GPU, slow)");
  addTpOptions(cl);
  addMemoryReserveOption(cl);
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
  Expected<std::optional<int64_t>> keptStates = cl.getInt("kept-states", 0, 1 << 16);
  Expected<std::optional<int64_t>> maxConnections = cl.getInt("max-connections", 1, 1 << 16);
  Expected<std::optional<int64_t>> maxClient = cl.getInt("max-client-connections", 1, 1 << 16);
  Expected<std::optional<int64_t>> headerTimeout = cl.getInt("header-timeout", 1, 3600);
  Expected<std::optional<int64_t>> bodyTimeout = cl.getInt("body-timeout", 1, 86400);
  Expected<std::optional<int64_t>> idleTimeout = cl.getInt("idle-timeout", 1, 3600);
  Expected<std::optional<int64_t>> maxBody = cl.getInt("max-body-bytes", 1024, int64_t{1} << 32);
  Expected<std::optional<int64_t>> maxBodyMemory =
      cl.getInt("max-body-memory", 1 << 20, int64_t{1} << 40);
  Expected<std::optional<int64_t>> monitorPort = cl.getInt("monitor-port", 0, 65535);
  Expected<std::optional<int64_t>> drainTimeout = cl.getInt("drain-timeout", 0, 86400);
  Expected<std::optional<int64_t>> draftTokens = cl.getInt("draft-tokens", 0, 1 << 16);
  for (const auto *value :
       {&port, &maxWaiting, &keptStates, &maxConnections, &maxClient, &headerTimeout, &bodyTimeout,
        &idleTimeout, &maxBody, &maxBodyMemory, &monitorPort, &drainTimeout, &draftTokens}) {
    if (!value->ok()) {
      return cl.fail(value->status());
    }
  }

  // Request bodies and the strings made from them are megabytes each: served from mmap, they go
  // back to the system once freed. glibc's default threshold rises to 32 MiB after the first such
  // free, and the memory of every later one then stays with the process (its RSS never returns
  // to idle after a burst of large requests).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
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
  // The draft depth, against the windows the plan verifies: refused before any weight loads.
  std::vector<std::string> verifyPrograms;
  const int64_t widest = runtime::Engine::maxWindowOf((*plan)->root(), 1, &verifyPrograms);
  const bool headGuesses = runtime::Engine::guessesAhead((*plan)->root());
  const int64_t drafts = draftTokens->value_or(std::min<int64_t>(widest - 1, kDefaultDraftTokens));
  if (drafts > widest - 1) {
    return cl.fail(
        invalidArgument("--draft-tokens ", drafts, " needs verify windows of ", drafts + 1,
                        " rows; ", cl.positionals()[0],
                        verifyPrograms.empty()
                            ? " has no verify program (compile it with --decode BxR, R > 1)"
                            : strCat(" verifies ", strJoin(verifyPrograms, ", "),
                                     " (B sequences x R rows): at most ", widest - 1, " drafts")));
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
  for (const char *tpOption : {"tp-timeout", "tp-secret", "tp-secret-file", "tp-hello-timeout"}) {
    if (cl.get(tpOption) && !tpListen) {
      return cl.fail(
          invalidArgument("--", tpOption, " is for --tp-listen's workers: it needs --tp-listen"));
    }
  }
  Expected<runtime::TcpCommOptions> tpOptions = tpOptionsFrom(cl);
  if (!tpOptions.ok()) {
    return cl.fail(tpOptions.status());
  }
  if (tpListen && tpOptions->secret.empty()) {
    // Anyone who can reach the port could join the group and see (and steer) every request.
    Expected<std::pair<std::string, int>> address = runtime::parseHostPort(*tpListen);
    const std::string host = address.ok() ? address->first : *tpListen;
    if (host != "127.0.0.1" && host != "localhost" && host != "::1") {
      return cl.fail(invalidArgument("--tp-listen ", *tpListen,
                                     " is reachable from other machines: give the group a "
                                     "secret (--tp-secret-file FILE, every rank the same)"));
    }
    std::fprintf(stderr, "glmc serve: warning: --tp-listen without --tp-secret-file: any local "
                         "user may join the tensor-parallel group\n");
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
  // Before any weight loads: this process holds one rank with --tp-listen, else all of them.
  const std::optional<uint64_t> keptForMemory =
      *keptStates ? std::optional<uint64_t>(static_cast<uint64_t>(**keptStates)) : std::nullopt;
  if (Status fits = checkHostMemoryForPlan(cl, **plan, tpListen ? 1 : tp, keptForMemory);
      !fits.ok()) {
    return cl.fail(fits);
  }
  Expected<std::unique_ptr<runtime::Engine>> engine =
      tpListen ? openLockstepEngine(std::move(plan).value(), **checkpoint, *tpListen, *tpOptions,
                                    *transport, engineOptions.weights)
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
  const plan::StatePool *pool = (*engine)->plan().state_pool();
  const int64_t sequences = pool != nullptr ? pool->max_sequences() : 1;
  const int64_t kept = keptStates->value_or(
      static_cast<int64_t>(defaultKeptStates(static_cast<uint64_t>(sequences))));
  if (kept > 0) {
    std::printf("glmc serve: up to %lld prompt states kept for reuse, %.1f MiB each a rank\n",
                static_cast<long long>(kept),
                static_cast<double>((*engine)->keptStateBytes()) / (1 << 20));
  }
  if (drafts > 0) { // drafts > 0 only where the plan verifies windows (checked above)
    std::printf("glmc serve: speculative decoding: copy drafts%s, up to %lld a window (verify "
                "programs %s)\n",
                headGuesses ? ", else the MTP head's guess" : "", static_cast<long long>(drafts),
                strJoin(verifyPrograms, ", ").c_str());
  }
  runtime::Scheduler scheduler(std::move(engine).value(), maxWaiting->value_or(4 * sequences),
                               static_cast<size_t>(kept), {.maxTokens = drafts});

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
  options.connections.maxConnections = static_cast<int>(maxConnections->value_or(256));
  options.connections.maxPerClient = static_cast<int>(maxClient->value_or(32));
  options.connections.headerTimeoutMs = static_cast<int>(headerTimeout->value_or(10) * 1000);
  options.connections.bodyTimeoutMs = static_cast<int>(bodyTimeout->value_or(30) * 1000);
  options.connections.idleTimeoutMs = static_cast<int>(idleTimeout->value_or(5) * 1000);
  options.maxBodyBytes = static_cast<size_t>(maxBody->value_or(32 << 20));
  options.connections.maxBodyMemory = static_cast<size_t>(maxBodyMemory->value_or(768 << 20));
  if (options.connections.maxBodyMemory < options.maxBodyBytes) {
    return cl.fail(invalidArgument("--max-body-memory (", options.connections.maxBodyMemory,
                                   ") is below --max-body-bytes (", options.maxBodyBytes,
                                   "): no body of the largest size could be read"));
  }
  options.monitorPort = static_cast<int>(monitorPort->value_or(-1));
  options.monitorHost = cl.get("monitor-host").value_or("127.0.0.1");
  options.metricsOpen = cl.has("metrics-open");
  const int drainSeconds = static_cast<int>(drainTimeout->value_or(30));
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
  if (http.monitorPort() >= 0) {
    std::printf("glmc serve: /health and /metrics also on http://%s:%d\n",
                options.monitorHost.c_str(), http.monitorPort());
  }
  std::printf("  curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' "
              "-d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": "
              "\"Hello!\"}], \"max_tokens\": 32}'\n",
              options.host.c_str(), *bound, options.servedNames.front().c_str());
  std::fflush(stdout);
  // The first signal drains (on a thread of its own, so that this one still hears a second);
  // a second exits at once.
  std::atomic<bool> serving{true};
  std::thread drain;
  std::thread signals([&] {
    int signal = 0;
    sigwait(&stopSignals, &signal);
    if (!serving) {
      return;
    }
    std::fprintf(stderr,
                 "glmc serve: signal %d: draining (requests running get up to %d s; a second "
                 "signal exits at once)\n",
                 signal, drainSeconds);
    drain = std::thread([&] {
      const int64_t cut = http.stop(drainSeconds);
      std::fprintf(stderr, "glmc serve: stopped (%lld requests cut at the drain deadline)\n",
                   static_cast<long long>(cut));
    });
    sigwait(&stopSignals, &signal);
    if (!serving) {
      return;
    }
    std::fprintf(stderr, "glmc serve: signal %d again: exiting now\n", signal);
    std::_Exit(128 + signal);
  });
  http.serve();
  // serve() also returns if the listener fails; wake the signal thread so it can be joined.
  serving = false;
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  if (drain.joinable()) {
    drain.join();
  }
  return 0;
}

} // namespace glm::tools
