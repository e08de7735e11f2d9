// `glmc up`: from a checkpoint to a live two-machine endpoint in one command — the plan compiled
// once (cached), both machines checked, rank 1 started on the worker over ssh and rank 0 here,
// their load progress relayed, a smoke request through both ranks, and a LIVE line; `glmc up status
// | logs [worker] | stop | restart` manage what it started (docs/deploy.md).
#include "base/Hash.h"
#include "base/Hmac.h"
#include "runtime/plan/PlanFile.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/PlanMemory.h"
#include "tools/glmc/UpChecks.h"
#include "tools/glmc/UpFacts.h"
#include "tools/glmc/UpProcess.h"
#include "tools/glmc/UpRemote.h"
#include "tools/glmc/UpSettings.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace glm::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 5;

void say(const std::string &text) {
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void step(int n, const std::string &text) { say(strCat("[", n, "/", kSteps, "] ", text)); }

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string fixed1(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Keeps the last run's log as LOG.1 (a failed start's evidence) and starts an empty one.
void rotateLog(const std::string &path) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    fs::rename(path, path + ".1", ec);
  }
}

// ----------------------------------------------------------------------------------- settings

/// The settings once checked, in the shapes the steps use.
struct Config {
  UpSettings settings;
  std::string glmc = thisExecutable();
  std::string model, workerModel, workerGlmc, workerRunDir;
  std::string runDir, cacheDir;
  std::string host, apiHost, servedName, target;
  int port = 0, tpPort = 0, tp = 2;
  int waitTimeout = 0, stopTimeout = 0, smokeTokens = 0;
  std::optional<uint64_t> reserve;
  Remote remote{"", {}};
  std::map<std::string, std::string> rankEnvironment;
};

Expected<Config> configFrom(UpSettings settings, const std::vector<std::string> &positionals) {
  Config c;
  if (!positionals.empty()) {
    settings.set("model", positionals.front(), SettingSource::CommandLine);
  }
  if (!settings.isSet("model")) {
    return invalidArgument("no checkpoint: give MODEL_DIR (or --model / GLMC_MODEL)");
  }
  if (!settings.isSet("worker") || settings.get("worker").empty()) {
    return invalidArgument("no worker: give --worker [USER@]HOST (or GLMC_WORKER), the machine "
                           "rank 1 runs on, reached by key-based ssh");
  }
  c.model = fs::absolute(settings.get("model")).lexically_normal().string();
  if (c.model.size() > 1 && c.model.back() == '/') {
    c.model.pop_back();
  }
  c.workerModel = settings.isSet("worker-model") ? settings.get("worker-model") : c.model;
  c.workerGlmc = settings.isSet("worker-glmc") ? settings.get("worker-glmc") : c.glmc;
  c.workerRunDir = settings.get("worker-run-dir");
  c.runDir = fs::absolute(settings.get("run-dir")).lexically_normal().string();
  c.cacheDir = fs::absolute(settings.get("cache-dir")).lexically_normal().string();
  c.host = settings.get("host");
  c.apiHost = (c.host == "0.0.0.0" || c.host == "::" || c.host.empty()) ? "127.0.0.1" : c.host;
  c.servedName = settings.isSet("served-name") ? settings.get("served-name")
                                               : fs::path(c.model).filename().string();
  c.target = settings.get("target");
  if (c.target != "cpu" && c.target != "sm_90a" && c.target != "sm_121a") {
    return invalidArgument(UpSettings::describe("target"), " is cpu, sm_90a or sm_121a, got '",
                           c.target, "'");
  }
  for (auto [option, out, min, max] :
       {std::tuple{"port", &c.port, 1, 65535}, std::tuple{"tp-port", &c.tpPort, 1, 65535},
        std::tuple{"tp", &c.tp, 1, 64}, std::tuple{"wait-timeout", &c.waitTimeout, 1, 86400},
        std::tuple{"stop-timeout", &c.stopTimeout, 1, 3600},
        std::tuple{"smoke-tokens", &c.smokeTokens, 1, 4096}}) {
    Expected<int64_t> value = settings.getInt(option, min, max);
    if (!value.ok()) {
      return value.status();
    }
    *out = static_cast<int>(*value);
  }
  if (c.tp != 2) {
    return invalidArgument(UpSettings::describe("tp"), " is ", c.tp,
                           ": glmc up runs two ranks, rank 0 here and rank 1 on the worker");
  }
  for (const char *option :
       {"max-seqs", "max-context", "pool-tokens", "tp-timeout", "tp-hello-timeout"}) {
    if (settings.isSet(option)) {
      Expected<int64_t> value = settings.getInt(option, 1, int64_t(1) << 40);
      if (!value.ok()) {
        return value.status();
      }
    }
  }
  const std::string mode = settings.get("checkpoint-hash");
  if (mode != "sampled" && mode != "full") {
    return invalidArgument(UpSettings::describe("checkpoint-hash"), " is sampled or full, got '",
                           mode, "'");
  }
  const std::string transport = settings.get("tp-transport");
  if (transport != "nccl" && transport != "tcp") {
    return invalidArgument(UpSettings::describe("tp-transport"), " is nccl or tcp, got '",
                           transport, "'");
  }
  Expected<std::optional<uint64_t>> reserve = settings.getSize("memory-reserve");
  if (!reserve.ok()) {
    return reserve.status();
  }
  c.reserve = *reserve;
  c.remote = Remote(settings.get("worker"), Remote::splitOptions(settings.get("ssh-options")));
  c.rankEnvironment = settings.rankEnvironment();
  for (const char *option : {"nccl-socket-ifname", "nccl-ib-hca"}) {
    if (settings.isSet(option)) {
      c.rankEnvironment[option == std::string("nccl-socket-ifname") ? "NCCL_SOCKET_IFNAME"
                                                                    : "NCCL_IB_HCA"] =
          settings.get(option);
    }
  }
  c.settings = std::move(settings);
  return c;
}

// ----------------------------------------------------------------------------------- the plan

struct CompiledPlan {
  std::string path;
  std::unique_ptr<runtime::PlanFile> file;
  PlanMemory memory;
  bool cached = false;
  double seconds = 0;
};

std::vector<std::string> compileArgs(const Config &c) {
  std::vector<std::string> args = {"--target", c.target, "--tp", std::to_string(c.tp)};
  for (auto [option, flag] :
       {std::pair{"precision", "--precision"}, std::pair{"max-seqs", "--max-seqs"},
        std::pair{"max-context", "--max-context"}, std::pair{"pool-tokens", "--pool-tokens"},
        std::pair{"kv", "--kv"}, std::pair{"dense", "--dense"}, std::pair{"lm-head", "--head"}}) {
    if (c.settings.isSet(option)) {
      args.push_back(flag);
      args.push_back(c.settings.get(option));
    }
  }
  return args;
}

/// What the plan depends on: the checkpoint's config, index and safetensors headers (not the
/// weight bytes, which the plan does not contain), the compile options and this glmc build.
Expected<std::string> planKey(const Config &c, const std::vector<std::string> &args) {
  Sha256 sha;
  sha.add(strCat("glmc-up-plan-1 format ", plan::kPlanFormatVersion));
  std::error_code ec;
  const auto exeTime = fs::last_write_time(c.glmc, ec).time_since_epoch().count();
  sha.add(strCat(c.glmc, " ", fs::file_size(c.glmc, ec), " ", exeTime));
  for (const std::string &a : args) {
    sha.add(a + "\n");
  }
  const fs::path config = fs::path(c.model) / "config.json";
  if (!fs::exists(config, ec)) {
    return notFound("the checkpoint ", c.model,
                    " has no config.json: is it a checkpoint "
                    "directory? (MODEL_DIR, --model / GLMC_MODEL)");
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry &e : fs::directory_iterator(c.model, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file(ec) && (ext == ".safetensors" || e.path().filename() == "config.json" ||
                                  e.path().filename() == "model.safetensors.index.json")) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path &f : files) {
    sha.add(f.filename().string() + "\n");
    if (f.extension() == ".safetensors") {
      std::ifstream in(f, std::ios::binary);
      uint64_t length = 0;
      in.read(reinterpret_cast<char *>(&length), 8);
      length = std::min<uint64_t>(length, uint64_t(100) << 20);
      std::string header(length, '\0');
      in.read(header.data(), static_cast<std::streamsize>(length));
      sha.add(strCat(fs::file_size(f, ec), "\n"));
      sha.add(header);
    } else {
      sha.add(readFile(f.string()));
    }
  }
  const Sha256Digest digest = sha.finish();
  std::string hex;
  char byte[3];
  for (size_t i = 0; i < 8; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

Expected<CompiledPlan> compilePlan(const Config &c) {
  const std::vector<std::string> args = compileArgs(c);
  Expected<std::string> key = planKey(c, args);
  if (!key.ok()) {
    return key.status();
  }
  CompiledPlan plan;
  const fs::path dir = fs::path(c.cacheDir) / "plans";
  plan.path = (dir / (*key + ".glmp")).string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return ioError("cannot create the plan cache ", dir.string(), ": ", ec.message(),
                   " (--cache-dir / GLMC_CACHE_DIR)");
  }
  const auto start = Clock::now();
  plan.cached = fs::exists(plan.path, ec);
  if (!plan.cached) {
    const std::string tmp = plan.path + strCat(".", getpid(), ".tmp");
    std::vector<std::string> argv = {c.glmc, "compile", c.model, "-o", tmp};
    argv.insert(argv.end(), args.begin(), args.end());
    Expected<CommandResult> result = runCommand(argv);
    if (!result.ok()) {
      return result.status();
    }
    if (result->exitCode != 0) {
      fs::remove(tmp, ec);
      std::string err = result->err;
      while (!err.empty() && err.back() == '\n') {
        err.pop_back();
      }
      // Its message names the option ("glmc compile: invalid argument: --max-context ..."),
      // which is also glmc up's.
      for (const std::string prefix : {"glmc compile: ", "invalid argument: ", "glmc compile: "}) {
        if (err.rfind(prefix, 0) == 0) {
          err = err.substr(prefix.size());
        }
      }
      return invalidArgument("glmc compile refused these settings: ", err);
    }
    fs::rename(tmp, plan.path, ec);
    if (ec) {
      return ioError(plan.path, ": ", ec.message());
    }
  }
  plan.seconds = secondsSince(start);
  Expected<std::unique_ptr<runtime::PlanFile>> file = runtime::PlanFile::open(plan.path);
  if (!file.ok()) {
    // A damaged cache entry: drop it so that the next start compiles again.
    fs::remove(plan.path, ec);
    return file.status().withContext("the cached plan (removed; run again to recompile)");
  }
  plan.memory = planMemory((*file)->root());
  plan.file = std::move(file).value();
  return plan;
}

// ----------------------------------------------------------------------------------- checks

struct Checked {
  MachineFacts head, worker;
  bool sameHost = false;
  std::string headAddress;
  uint64_t reserve = 0;
};

Expected<MachineFacts> probeWorker(const Config &c) {
  const std::string command =
      strCat(shellQuote(c.workerGlmc), " up probe --model ", shellQuote(c.workerModel),
             " --checkpoint-hash ", shellQuote(c.settings.get("checkpoint-hash")), " --run-dir ",
             shellQuote(c.workerRunDir));
  // A full hash of a large checkpoint takes minutes the first time.
  Expected<CommandResult> r = c.remote.run(command, "", 3600 * 1000);
  if (!r.ok()) {
    return r.status();
  }
  if (r->exitCode == 127) {
    return notFound("glmc is not at ", c.workerGlmc, " on ", c.remote.destination(),
                    ": install the same glmc build there, or name it with --worker-glmc / "
                    "GLMC_WORKER_GLMC");
  }
  if (r->exitCode != 0) {
    return Status(StatusCode::Unavailable,
                  strCat("`glmc up probe` failed on ", c.remote.destination(), " (exit ",
                         r->exitCode, "): ", r->err,
                         " — is the worker's glmc the same build as this one?"));
  }
  return machineFactsFromJson(r->out);
}

/// What the server being restarted holds and its stop gives back: its ports, and its ranks'
/// memory (its plan's per-rank total, on each machine), which MemAvailable does not count now.
struct HeldByUs {
  std::vector<int> ports;
  uint64_t headBytes = 0, workerBytes = 0;
};

Expected<Checked> checkMachines(const Config &c, const CompiledPlan &plan, const HeldByUs &held) {
  Checked k;
  ProbeRequest here;
  here.modelDir = c.model;
  here.hashMode = c.settings.get("checkpoint-hash");
  here.cacheDir = c.cacheDir;
  here.ports = {c.port, c.tpPort};
  here.runDir = c.runDir;
  k.head = probeThisMachine(here);
  Expected<MachineFacts> worker = probeWorker(c);
  if (!worker.ok()) {
    return worker.status();
  }
  k.worker = std::move(worker).value();
  if (!k.worker.runDirError.empty()) {
    return Status(StatusCode::Unavailable,
                  strCat("the worker's run directory: ", k.worker.runDirError,
                         " (--worker-run-dir / GLMC_WORKER_RUN_DIR)"));
  }
  k.sameHost = !k.head.bootId.empty() && k.head.bootId == k.worker.bootId;
  k.head.memAvailable += held.headBytes + (k.sameHost ? held.workerBytes : 0);
  if (!k.sameHost) {
    k.worker.memAvailable += held.workerBytes;
  }
  if (held.headBytes + held.workerBytes > 0) {
    say(strCat("  counting the running server's ", byteSizeText(held.headBytes + held.workerBytes),
               " as free: a restart stops it before the new ranks load"));
  }
  MachineNames names;
  names.head = strCat("this machine (", k.head.hostname, ")");
  names.worker = strCat("the worker (", c.remote.destination(), ")");
  GLM_RETURN_IF_ERROR(checkSameBuild(k.head, k.worker, names));
  GLM_RETURN_IF_ERROR(checkGpu(plan.memory, k.head, names.head));
  GLM_RETURN_IF_ERROR(checkGpu(plan.memory, k.worker, names.worker));
  GLM_RETURN_IF_ERROR(checkCheckpoint(k.head, k.worker, names));
  k.reserve = c.reserve.value_or(defaultHostReserve(plan.memory));
  GLM_RETURN_IF_ERROR(
      checkMachineMemory(plan.memory, k.head, k.sameHost ? 2 : 1, k.reserve, names.head));
  if (!k.sameHost) {
    GLM_RETURN_IF_ERROR(checkMachineMemory(plan.memory, k.worker, 1, k.reserve, names.worker));
  }
  GLM_RETURN_IF_ERROR(
      checkPortsFree(k.head, {c.port, c.tpPort},
                     {UpSettings::describe("port"), UpSettings::describe("tp-port")}, held.ports));
  if (c.settings.isSet("head-address")) {
    k.headAddress = c.settings.get("head-address");
  } else if (k.sameHost) {
    k.headAddress = "127.0.0.1";
  } else {
    Expected<std::string> address = sourceAddressToward(c.remote.host());
    if (!address.ok()) {
      return address.status().withContext("choosing the head address (set --head-address / "
                                          "GLMC_HEAD_ADDRESS)");
    }
    k.headAddress = *address;
  }
  Expected<std::vector<std::string>> resolved = resolveHost(k.headAddress);
  if (!resolved.ok()) {
    return resolved.status().withContext("the head address (--head-address / GLMC_HEAD_ADDRESS)");
  }
  GLM_RETURN_IF_ERROR(checkNoLoopback(!k.sameHost, k.headAddress, *resolved,
                                      c.settings.get("nccl-socket-ifname"), k.head, k.worker,
                                      names));
  // The figures a user compares with the machine.
  const int ranksHere = k.sameHost ? 2 : 1;
  say(strCat("  ", names.head, ": ", byteSizeText(k.head.memAvailable), " available, needs ",
             ranksHere, " x ", byteSizeText(plan.memory.perRankBytes), " + ",
             byteSizeText(k.reserve), " reserve",
             k.head.gpus.empty() ? std::string()
                                 : strCat("; GPU ", k.head.gpus.front().name, " (",
                                          k.head.gpus.front().arch, ")")));
  if (k.sameHost) {
    say(strCat("  ", names.worker, " is this machine (the same boot id): both ranks run here"));
  } else {
    say(strCat("  ", names.worker, ": ", byteSizeText(k.worker.memAvailable), " available, needs ",
               byteSizeText(plan.memory.perRankBytes), " + ", byteSizeText(k.reserve), " reserve",
               k.worker.gpus.empty() ? std::string()
                                     : strCat("; GPU ", k.worker.gpus.front().name, " (",
                                              k.worker.gpus.front().arch, ")")));
  }
  uint64_t bytes = 0;
  for (const CheckpointFileFacts &f : k.head.checkpoint.files) {
    bytes += f.size;
  }
  say(strCat("  checkpoint: ", k.head.checkpoint.files.size(), " files, ", byteSizeText(bytes),
             ", the same on both machines (sizes and ", k.head.checkpoint.hashMode, " SHA-256)"));
  say(strCat("  ports ", c.port, " (API) and ", c.tpPort, " (ranks) free; the worker joins at ",
             k.headAddress, ":", c.tpPort));
  return k;
}

// ----------------------------------------------------------------------------------- running

bool headRuns(const UpState &s) {
  return processAlive(s.headPid) && processCommandLine(s.headPid).find(s.plan) != std::string::npos;
}

Status stopRanks(const UpState &s, int stopTimeout) {
  // Rank 0 first: it drains the requests in flight, then the worker has nobody to wait for.
  if (headRuns(s)) {
    GLM_RETURN_IF_ERROR(stopLocalProcess(s.headPid, stopTimeout));
  }
  if (s.workerPid > 0) {
    Remote remote(s.workerDestination, s.sshOptions);
    GLM_RETURN_IF_ERROR(remote.stopProcess(s.workerPid, s.workerPlan, stopTimeout));
  }
  return Status::success();
}

/// The worker's log relayed over ssh while it runs; ends when its rank ends (tail --pid).
struct WorkerRelay {
  StreamingChild child;
  LineBuffer lines;
  bool ended = false;

  static Expected<WorkerRelay> start(const Remote &remote, const UpState &s, bool fromStart) {
    WorkerRelay relay;
    Expected<StreamingChild> child = spawnStreaming(
        remote.argv(strCat("tail -n ", fromStart ? "+1" : "0", " --pid=", s.workerPid, " -F ",
                           shellQuote(s.workerLog), " 2>/dev/null")));
    if (!child.ok()) {
      return child.status();
    }
    relay.child = *child;
    return relay;
  }
  std::vector<std::string> poll() {
    std::vector<std::string> out;
    char buffer[4096];
    while (!ended) {
      const ssize_t n = read(child.fd, buffer, sizeof buffer);
      if (n > 0) {
        lines.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        ended = true;
        close(child.fd);
        processAlive(child.pid); // reaps it
      }
      break;
    }
    while (std::optional<std::string> line = lines.next()) {
      out.push_back(std::move(*line));
    }
    return out;
  }
  void stop() {
    if (!ended) {
      kill(child.pid, SIGTERM);
      close(child.fd);
      waitpid(child.pid, nullptr, 0);
      ended = true;
    }
  }
};

httplib::Headers authHeaders(const Config &c) {
  httplib::Headers headers;
  if (c.settings.isSet("api-key")) {
    headers.emplace("Authorization", "Bearer " + c.settings.get("api-key"));
  }
  return headers;
}

/// GET /health: 200 once every rank has joined and the group formed.
std::pair<int, std::string> health(const std::string &host, int port) {
  httplib::Client client(host, port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Result r = client.Get("/health");
  if (!r) {
    return {0, ""};
  }
  return {r->status, r->body};
}

Status smokeRequest(const Config &c) {
  httplib::Client client(c.apiHost, c.port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(600, 0);
  const Json body = {{"model", c.servedName},
                     {"messages", Json::array({{{"role", "user"}, {"content", "Say hello."}}})},
                     {"max_tokens", c.smokeTokens}};
  const auto start = Clock::now();
  httplib::Result r =
      client.Post("/v1/chat/completions", authHeaders(c), body.dump(), "application/json");
  if (!r) {
    return Status(StatusCode::Unavailable, strCat("the smoke request to http://", c.apiHost, ":",
                                                  c.port, "/v1/chat/completions got no answer (",
                                                  httplib::to_string(r.error()), ")"));
  }
  const Json reply = Json::parse(r->body, nullptr, false);
  if (r->status != 200 || reply.is_discarded() || reply.contains("error") ||
      !reply.contains("choices")) {
    return Status(StatusCode::Unavailable,
                  strCat("the smoke request failed: HTTP ", r->status, ": ", r->body));
  }
  const Json &message = reply["choices"][0]["message"];
  std::string text = message.value("content", "");
  if (text.empty()) {
    text = message.value("reasoning_content", "");
  }
  const int tokens = reply.contains("usage") ? reply["usage"].value("completion_tokens", 0) : 0;
  if (tokens < 1) {
    return Status(StatusCode::Unavailable,
                  strCat("the smoke request generated no token: ", r->body));
  }
  for (char &ch : text) {
    if (ch == '\n') {
      ch = ' ';
    }
  }
  say(strCat("  ", tokens, " tokens through both ranks in ", fixed1(secondsSince(start)), " s: \"",
             text.substr(0, 120), "\""));
  return Status::success();
}

/// The endpoint line `start` and `status` print.
std::string endpoint(const UpState &s) { return strCat("http://", s.apiHost, ":", s.port, "/v1"); }

volatile std::sig_atomic_t gStopSignal = 0;
void onStopSignal(int signal) { gStopSignal = signal; }

/// --foreground after LIVE: relay both logs, end with the server, stop the other rank when one
/// ends. Returns the exit code (rank 0's, or 1 when rank 1 ended first).
int watchForeground(const Config &c, const UpState &s, WorkerRelay &relay, FileFollower &head) {
  struct sigaction action{};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
  while (true) {
    for (const std::string &line : head.poll()) {
      say("  rank 0 | " + line);
    }
    for (const std::string &line : relay.poll()) {
      say("  rank 1 | " + line);
    }
    if (gStopSignal != 0) {
      say(strCat("glmc up: signal ", static_cast<int>(gStopSignal), ": stopping both ranks"));
      relay.stop();
      const Status stopped = stopRanks(s, c.stopTimeout);
      (void)removeUpState(c.runDir);
      const std::optional<int> code = exitCodeOf(s.headPid);
      if (!stopped.ok()) {
        std::fprintf(stderr, "glmc up: %s\n", stopped.message().c_str());
        return 1;
      }
      return code.value_or(0);
    }
    if (!processAlive(s.headPid)) {
      const int code = exitCodeOf(s.headPid).value_or(1);
      for (const std::string &line : head.poll()) {
        say("  rank 0 | " + line);
      }
      say(strCat("glmc up: rank 0 exited (code ", code, "): stopping rank 1"));
      relay.stop();
      Remote remote(s.workerDestination, s.sshOptions);
      (void)remote.stopProcess(s.workerPid, s.workerPlan, c.stopTimeout);
      (void)removeUpState(c.runDir);
      return code;
    }
    if (relay.ended) {
      Remote remote(s.workerDestination, s.sshOptions);
      Expected<bool> runs = remote.processRuns(s.workerPid, s.workerPlan);
      if (!runs.ok() || *runs) {
        // The worker out of reach for a moment says nothing about its rank: watch again.
        std::this_thread::sleep_for(std::chrono::seconds(2));
        Expected<WorkerRelay> again = WorkerRelay::start(remote, s, false);
        if (again.ok()) {
          relay = std::move(again).value();
        }
        continue;
      }
      say(strCat("glmc up: rank 1 on ", s.workerDestination, " exited: stopping rank 0"));
      (void)stopLocalProcess(s.headPid, c.stopTimeout);
      (void)removeUpState(c.runDir);
      const int code = exitCodeOf(s.headPid).value_or(1);
      return code == 0 ? 1 : code; // a rank failed, even if rank 0 then stopped cleanly
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

/// Starts both ranks (after the checks passed), waits for them, sends the smoke request, prints
/// LIVE; with --foreground stays. `old` is stopped first (a restart).
int launch(const CommandLine &cl, const Config &c, const CompiledPlan &plan, const Checked &k,
           const std::optional<UpState> &old) {
  if (old) {
    say(strCat("  stopping the running server (", endpoint(*old), ")"));
    if (Status s = stopRanks(*old, c.stopTimeout); !s.ok()) {
      return cl.fail(s);
    }
    (void)removeUpState(c.runDir);
  }
  step(3, strCat("Launch: rank 1 on ", c.remote.destination(), ", then rank 0 here"));
  UpState s;
  s.headLog = (fs::path(c.runDir) / "head.log").string();
  s.workerDestination = c.remote.destination();
  s.sshOptions = c.remote.options();
  s.workerLog = (fs::path(k.worker.runDir) / "worker.log").string();
  s.workerPlan = (fs::path(k.worker.runDir) / "worker-plan.glmp").string();
  s.workerGlmc = c.workerGlmc;
  s.apiHost = c.apiHost;
  s.port = c.port;
  s.tpPort = c.tpPort;
  s.servedName = c.servedName;
  s.plan = plan.path;
  s.model = c.model;
  s.started = utcNow();
  s.apiKey = c.settings.isSet("api-key");
  // A fresh secret for each start: only these two ranks can join.
  Expected<std::string> secret = randomHex(32);
  if (!secret.ok()) {
    return cl.fail(secret.status());
  }
  const std::string headSecret = (fs::path(c.runDir) / "head.secret").string();
  const std::string workerSecret = (fs::path(k.worker.runDir) / "worker.secret").string();
  if (Status w = writePrivateFile(headSecret, *secret); !w.ok()) {
    return cl.fail(w);
  }
  if (Status w = c.remote.sendFile(workerSecret, *secret); !w.ok()) {
    return cl.fail(w);
  }
  if (Status w = c.remote.sendFile(s.workerPlan, readFile(plan.path)); !w.ok()) {
    return cl.fail(w);
  }
  const std::string reserve = std::to_string(k.reserve);
  std::vector<std::string> tpArgs;
  for (const char *option : {"tp-timeout", "tp-hello-timeout"}) {
    if (c.settings.isSet(option)) {
      tpArgs.push_back(strCat("--", option));
      tpArgs.push_back(c.settings.get(option));
    }
  }
  std::vector<std::string> worker = {c.workerGlmc,
                                     "worker",
                                     s.workerPlan,
                                     "--model",
                                     c.workerModel,
                                     "--rank",
                                     "1",
                                     "--head",
                                     strCat(k.headAddress, ":", c.tpPort),
                                     "--tp-secret-file",
                                     workerSecret,
                                     "--memory-reserve",
                                     reserve};
  worker.insert(worker.end(), tpArgs.begin(), tpArgs.end());
  (void)c.remote.run(strCat("mv -f ", shellQuote(s.workerLog), " ", shellQuote(s.workerLog + ".1"),
                            " 2>/dev/null; true"));
  Expected<pid_t> workerPid = c.remote.startDetached(worker, s.workerLog, c.rankEnvironment);
  if (!workerPid.ok()) {
    return cl.fail(workerPid.status());
  }
  s.workerPid = *workerPid;
  say(strCat("  rank 1 on ", c.remote.destination(), ": pid ", s.workerPid, ", log ", s.workerLog));
  std::vector<std::string> head = {c.glmc,
                                   "serve",
                                   plan.path,
                                   "--model",
                                   c.model,
                                   "--host",
                                   c.host,
                                   "--port",
                                   std::to_string(c.port),
                                   "--served-name",
                                   c.servedName,
                                   "--tp-listen",
                                   strCat(k.headAddress, ":", c.tpPort),
                                   "--tp-secret-file",
                                   headSecret,
                                   "--memory-reserve",
                                   reserve};
  if (c.settings.isSet("api-key")) {
    head.push_back("--api-key");
    head.push_back(c.settings.get("api-key"));
  }
  if (plan.memory.target != "cpu") {
    head.push_back("--tp-transport");
    head.push_back(c.settings.get("tp-transport"));
  }
  head.insert(head.end(), tpArgs.begin(), tpArgs.end());
  rotateLog(s.headLog);
  Expected<pid_t> headPid = spawnLogged(head, s.headLog, c.rankEnvironment);
  if (!headPid.ok()) {
    (void)stopRanks(s, c.stopTimeout);
    return cl.fail(headPid.status());
  }
  s.headPid = *headPid;
  say(strCat("  rank 0 here: pid ", s.headPid, ", log ", s.headLog));
  if (Status w = saveUpState(c.runDir, s); !w.ok()) {
    (void)stopRanks(s, c.stopTimeout);
    return cl.fail(w);
  }

  step(4, strCat("Loading: ", byteSizeText(plan.memory.perRankBytes),
                 " per rank; both ranks' progress below"));
  const auto start = Clock::now();
  FileFollower headLines(s.headLog);
  Expected<WorkerRelay> relay = WorkerRelay::start(c.remote, s, true);
  if (!relay.ok()) {
    (void)stopRanks(s, c.stopTimeout);
    return cl.fail(relay.status());
  }
  auto failStart = [&](const std::string &why) {
    relay->stop();
    for (const std::string &line : headLines.poll()) {
      say("  rank 0 | " + line);
    }
    (void)stopRanks(s, c.stopTimeout);
    (void)removeUpState(c.runDir);
    return cl.fail(Status(StatusCode::Unavailable,
                          strCat(why, ". Both ranks are stopped; their logs: ", s.headLog,
                                 " (here), ", s.workerLog, " (on ", s.workerDestination,
                                 "); glmc up logs [worker] shows them")));
  };
  auto nextHealth = Clock::now();
  std::string lastHealth;
  while (true) {
    for (const std::string &line : headLines.poll()) {
      say("  rank 0 | " + line);
    }
    for (const std::string &line : relay->poll()) {
      say("  rank 1 | " + line);
    }
    if (!processAlive(s.headPid)) {
      return failStart(strCat("rank 0 exited (code ", exitCodeOf(s.headPid).value_or(1),
                              ") before it was ready"));
    }
    if (relay->ended) {
      Expected<bool> runs = c.remote.processRuns(s.workerPid, s.workerPlan);
      if (runs.ok() && !*runs) {
        // Its last lines may still be on the way: print them before the verdict.
        if (Expected<CommandResult> tail =
                c.remote.run(strCat("tail -n 20 ", shellQuote(s.workerLog)));
            tail.ok()) {
          std::istringstream in(tail->out);
          for (std::string line; std::getline(in, line);) {
            say("  rank 1 | " + line);
          }
        }
        return failStart(strCat("rank 1 on ", s.workerDestination,
                                " exited before the group "
                                "formed"));
      }
      Expected<WorkerRelay> again = WorkerRelay::start(c.remote, s, false);
      if (again.ok()) {
        *relay = std::move(again).value();
      }
    }
    if (Clock::now() >= nextHealth) {
      nextHealth = Clock::now() + std::chrono::seconds(1);
      auto [code, body] = health(c.apiHost, c.port);
      if (code == 200) {
        break;
      }
      lastHealth = body;
    }
    if (secondsSince(start) > c.waitTimeout) {
      return failStart(strCat("not ready after ", c.waitTimeout, " s (",
                              UpSettings::describe("wait-timeout"),
                              "); /health said: ", lastHealth.empty() ? "nothing" : lastHealth));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  say(strCat("  both ranks loaded and joined in ", fixed1(secondsSince(start)), " s"));

  step(5, "Smoke: one chat request through both ranks");
  if (Status smoke = smokeRequest(c); !smoke.ok()) {
    return failStart(smoke.message());
  }
  say(strCat("LIVE ", endpoint(s), " model '", s.servedName, "' (rank 0 on ", k.head.hostname,
             ", rank 1 on ", s.workerDestination, "; glmc up status | logs [worker] | stop)"));
  if (c.settings.get("foreground") == "1") {
    return watchForeground(c, s, *relay, headLines);
  }
  relay->stop();
  return 0;
}

// ----------------------------------------------------------------------------------- actions

int runStartOrRestart(const CommandLine &cl, bool restart) {
  Expected<UpSettings> settings = UpSettings::resolve(cl, UpSettings::processEnvironment());
  if (!settings.ok()) {
    return cl.fail(settings.status());
  }
  std::vector<std::string> positionals(cl.positionals().begin() + 1, cl.positionals().end());
  const std::string runDir = fs::absolute(settings->get("run-dir")).lexically_normal().string();
  Expected<RunLock> lock = RunLock::acquire(runDir);
  if (!lock.ok()) {
    return cl.fail(lock.status());
  }
  Expected<std::optional<UpState>> old = loadUpState(runDir);
  if (!old.ok()) {
    return cl.fail(old.status());
  }
  // A restart keeps the running server's checkpoint and worker unless given new ones.
  if (restart && *old) {
    if (!settings->isSet("model") && positionals.empty()) {
      settings->set("model", (*old)->model, SettingSource::Default);
    }
    if (!settings->isSet("worker")) {
      settings->set("worker", (*old)->workerDestination, SettingSource::Default);
    }
  }
  Expected<Config> config = configFrom(std::move(settings).value(), positionals);
  if (!config.ok()) {
    if (*old && headRuns(**old)) {
      std::fprintf(stderr, "glmc up: nothing was changed: the running server (%s) keeps serving\n",
                   endpoint(**old).c_str());
    }
    return cl.fail(config.status());
  }
  const Config &c = *config;
  HeldByUs held;
  if (*old) {
    const bool up = headRuns(**old);
    if (!restart && up) {
      say(strCat("glmc up: already running: ", endpoint(**old), " model '", (*old)->servedName,
                 "' since ", (*old)->started,
                 ". Nothing to do: glmc up restart applies new settings, glmc up stop stops it."));
      return 0;
    }
    if (up) {
      held.ports = {(*old)->port, (*old)->tpPort};
      if (Expected<std::unique_ptr<runtime::PlanFile>> running =
              runtime::PlanFile::open((*old)->plan);
          running.ok()) {
        held.headBytes = planMemory((*running)->root()).perRankBytes;
        held.workerBytes = held.headBytes;
      }
    }
  } else if (restart) {
    say("glmc up: nothing was running: starting");
  }
  // Every check before anything is stopped: a restart that fails them leaves the server up.
  auto refuse = [&](const Status &why) {
    if (*old && headRuns(**old)) {
      std::fprintf(stderr, "glmc up: nothing was changed: the running server (%s) keeps serving\n",
                   endpoint(**old).c_str());
    }
    return cl.fail(why);
  };
  say(strCat("glmc up: ", c.model, " on this machine and ", c.remote.destination(),
             c.settings.envFile().empty() ? ""
                                          : strCat(" (settings from ", c.settings.envFile(), ")")));
  step(1, strCat("Plan: ", c.target, ", TP ", c.tp, " (cached in ", c.cacheDir, "/plans)"));
  Expected<CompiledPlan> plan = compilePlan(c);
  if (!plan.ok()) {
    return refuse(plan.status());
  }
  const PlanMemory &m = plan->memory;
  say(strCat("  ", plan->cached ? "cached " : "compiled ", plan->path,
             plan->cached ? "" : strCat(" in ", fixed1(plan->seconds), " s"), ": ",
             byteSizeText(m.perRankBytes), " per rank (", byteSizeText(m.fixedBytes()),
             " weights and fixed state, ", byteSizeText(m.poolBytes), " for a pool of ",
             m.poolTokens(), " tokens at ", fixed1(m.stateBytesPerToken()), " bytes each; a ",
             m.maxContext, "-token window)"));
  step(2, strCat("Checks: ", c.remote.destination(), " over ssh, memory, GPU, checkpoint, ports"));
  Expected<Checked> checked = checkMachines(c, *plan, held);
  if (!checked.ok()) {
    return refuse(checked.status());
  }
  std::optional<UpState> stopFirst;
  if (*old && (headRuns(**old) || (*old)->workerPid > 0)) {
    stopFirst = **old;
  }
  return launch(cl, c, *plan, *checked, stopFirst);
}

/// The run directory from the settings alone (status, logs, stop need nothing else).
Expected<UpSettings> settingsForState(const CommandLine &cl) {
  return UpSettings::resolve(cl, UpSettings::processEnvironment());
}

int runStatus(const CommandLine &cl) {
  Expected<UpSettings> settings = settingsForState(cl);
  if (!settings.ok()) {
    return cl.fail(settings.status());
  }
  const std::string runDir = fs::absolute(settings->get("run-dir")).string();
  Expected<std::optional<UpState>> state = loadUpState(runDir);
  if (!state.ok()) {
    return cl.fail(state.status());
  }
  if (!*state) {
    say(strCat("glmc up: not running (no state in ", runDir, ")"));
    return 3;
  }
  const UpState &s = **state;
  const bool head = headRuns(s);
  Remote remote(s.workerDestination, s.sshOptions);
  Expected<bool> worker = remote.processRuns(s.workerPid, s.workerPlan);
  auto [code, body] = head ? health(s.apiHost, s.port) : std::pair<int, std::string>{0, ""};
  const bool up = head && worker.ok() && *worker && code == 200;
  say(strCat("glmc up: ", up ? "running" : "NOT healthy", ": ", endpoint(s), " model '",
             s.servedName, "', started ", s.started));
  say(strCat("  rank 0: pid ", s.headPid, " here, ", head ? "running" : "not running", ", log ",
             s.headLog));
  say(strCat("  rank 1: pid ", s.workerPid, " on ", s.workerDestination, ", ",
             !worker.ok() ? strCat("unknown (", worker.status().message(), ")")
             : *worker    ? std::string("running")
                          : std::string("not running"),
             ", log ", s.workerLog));
  say(strCat("  health: ", code == 0 ? std::string("no answer") : strCat(code, " ", body)));
  say(strCat("  plan ", s.plan, ", checkpoint ", s.model));
  return up ? 0 : 1;
}

int runLogs(const CommandLine &cl) {
  Expected<UpSettings> settings = settingsForState(cl);
  if (!settings.ok()) {
    return cl.fail(settings.status());
  }
  const std::string runDir = fs::absolute(settings->get("run-dir")).string();
  Expected<std::optional<UpState>> state = loadUpState(runDir);
  if (!state.ok()) {
    return cl.fail(state.status());
  }
  const std::vector<std::string> &p = cl.positionals();
  const bool worker = p.size() > 1 && p[1] == "worker";
  if (p.size() > 1 && !worker) {
    return cl.fail(invalidArgument("glmc up logs [worker]: got '", p[1], "'"));
  }
  Expected<std::optional<int64_t>> lines = cl.getInt("lines", 1, 1 << 24);
  if (!lines.ok()) {
    return cl.fail(lines.status());
  }
  const std::string n = std::to_string(lines->value_or(100));
  std::string headLog = (fs::path(runDir) / "head.log").string();
  if (!*state && worker) {
    return cl.fail(notFound("no state in ", runDir, ": where the worker's log is is unknown"));
  }
  std::vector<std::string> argv;
  if (worker) {
    Remote remote((*state)->workerDestination, (*state)->sshOptions);
    argv = remote.argv(
        strCat("tail -n ", n, cl.has("follow") ? " -F " : " ", shellQuote((*state)->workerLog)));
  } else {
    if (*state) {
      headLog = (*state)->headLog;
    }
    argv = {"tail", "-n", n};
    if (cl.has("follow")) {
      argv.push_back("-F");
    }
    argv.push_back(headLog);
  }
  std::fflush(stdout);
  std::vector<char *> args;
  for (std::string &a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  execvp(args[0], args.data());
  return cl.fail(ioError("cannot run ", argv[0]));
}

int runStop(const CommandLine &cl) {
  Expected<UpSettings> settings = settingsForState(cl);
  if (!settings.ok()) {
    return cl.fail(settings.status());
  }
  const std::string runDir = fs::absolute(settings->get("run-dir")).string();
  Expected<int64_t> timeout = settings->getInt("stop-timeout", 1, 3600);
  if (!timeout.ok()) {
    return cl.fail(timeout.status());
  }
  Expected<RunLock> lock = RunLock::acquire(runDir);
  if (!lock.ok()) {
    return cl.fail(lock.status());
  }
  Expected<std::optional<UpState>> state = loadUpState(runDir);
  if (!state.ok()) {
    return cl.fail(state.status());
  }
  if (!*state) {
    say(strCat("glmc up: nothing to stop (no state in ", runDir, ")"));
    return 0;
  }
  if (Status s = stopRanks(**state, static_cast<int>(*timeout)); !s.ok()) {
    // The state stays, so that another stop can finish the job.
    return cl.fail(s);
  }
  (void)removeUpState(runDir);
  say(strCat("glmc up: stopped rank 0 (pid ", (*state)->headPid, ") and rank 1 (pid ",
             (*state)->workerPid, " on ", (*state)->workerDestination, ")"));
  return 0;
}

/// `glmc up probe`: this machine's facts as JSON, for the launcher on the other machine.
int runProbe(const CommandLine &cl) {
  ProbeRequest request;
  request.modelDir = cl.get("model").value_or("");
  request.hashMode = cl.get("checkpoint-hash").value_or("sampled");
  const char *home = std::getenv("HOME");
  request.cacheDir = cl.get("cache-dir").value_or(strCat(home ? home : "/root", "/.cache/glmc"));
  request.runDir = cl.get("run-dir").value_or("");
  std::printf("%s\n", toJson(probeThisMachine(request)).dump().c_str());
  return 0;
}

} // namespace

int runUp(const std::vector<std::string> &args) {
  CommandLine cl("glmc up", "[start|status|logs [worker]|stop|restart] [MODEL_DIR] [options]",
                 "Serves a checkpoint on two machines: compiles the plan (once, cached), checks "
                 "both machines\n(memory against the plan, GPU, the checkpoint identical on the "
                 "worker, ports, no loopback\nbetween two hosts), starts rank 1 on the worker over "
                 "ssh and rank 0 here, relays their load\nprogress, sends a smoke request through "
                 "both and prints the LIVE endpoint.\n  status             what runs, its health\n"
                 "  logs [worker]      rank 0's log (here) or rank 1's (over ssh); --follow, "
                 "--lines N\n  stop               stops both ranks\n  restart [options]  "
                 "checks the new settings first, then stops and starts (a failed check\n"
                 "                     leaves the running server up)\nSettings come from the "
                 "command line, then the environment, then ./glmc-up.env (KEY=VALUE),\nthen the "
                 "defaults; NCCL_* and GLM_* variables from the environment or the file go to "
                 "both\nranks. docs/deploy.md walks through a two-GB10 start.");
  UpSettings::declareOptions(cl);
  cl.option("lines", "N", "logs: how many of the last lines (default 100)")
      .flag("follow", "logs: keep printing what the log gets");
  cl.positional(0, 2);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  // A write to a command that exited (ssh) must fail the write, not kill the launcher.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string action = cl.positionals().empty() ? "start" : cl.positionals().front();
  static const std::vector<std::string> kActions = {"start", "status",  "logs",
                                                    "stop",  "restart", "probe"};
  if (std::find(kActions.begin(), kActions.end(), action) == kActions.end()) {
    // `glmc up MODEL_DIR`: the action is start.
    std::vector<std::string> withStart = {"start"};
    withStart.insert(withStart.end(), args.begin(), args.end());
    return runUp(withStart);
  }
  if (action != "logs" && action != "start" && action != "restart" && cl.positionals().size() > 1) {
    return cl.fail(
        invalidArgument("glmc up ", action, " takes no argument, got '", cl.positionals()[1], "'"));
  }
  if (action == "status") {
    return runStatus(cl);
  }
  if (action == "logs") {
    return runLogs(cl);
  }
  if (action == "stop") {
    return runStop(cl);
  }
  if (action == "probe") {
    return runProbe(cl);
  }
  return runStartOrRestart(cl, action == "restart");
}

} // namespace glm::tools
