// `glmc up`'s parts without the machines: settings precedence and the settings file, the plan's
// memory and the largest window that fits (against plans glmc compiles), and every check's
// refusal over fake facts (tests/e2e/up/run.sh runs the launcher itself through a real sshd).
#include "tools/glmc/PlanMemory.h"
#include "tools/glmc/UpChecks.h"
#include "tools/glmc/UpFacts.h"
#include "tools/glmc/UpProcess.h"
#include "tools/glmc/UpRemote.h"
#include "tools/glmc/UpSettings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace glm::tools {
namespace {

namespace fs = std::filesystem;
// The message holds `part` (printed whole when it does not).
#define EXPECT_HAS(text, part)                                                                     \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

fs::path tempDir(const std::string &name) {
  const fs::path dir = fs::temp_directory_path() / strCat("glm-up-test-", getpid(), "-", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// Parses `args` against glmc up's options and resolves them over `env`.
Expected<UpSettings> resolve(const std::vector<std::string> &args,
                             const std::map<std::string, std::string> &env) {
  static std::vector<std::unique_ptr<CommandLine>> keep; // settings outlive the parse
  keep.push_back(std::make_unique<CommandLine>("glmc up", "", ""));
  CommandLine &cl = *keep.back();
  UpSettings::declareOptions(cl);
  cl.positional(0, 2);
  if (Status s = cl.parse(args); !s.ok()) {
    return s;
  }
  return UpSettings::resolve(cl, env);
}

TEST(UpSettings, CommandLineBeatsEnvironmentBeatsFileBeatsDefault) {
  const fs::path dir = tempDir("precedence");
  std::ofstream(dir / "glmc-up.env") << "# comment\n"
                                        "GLMC_PORT=1111\n"
                                        "export GLMC_TP_PORT='2222'\n"
                                        "GLMC_SERVED_NAME=\"from file\"\n"
                                        "GLMC_HOST=0.0.0.0 # trailing comment\n"
                                        "NCCL_DEBUG=INFO\n";
  std::map<std::string, std::string> env = {{"GLMC_ENV_FILE", (dir / "glmc-up.env").string()},
                                            {"GLMC_TP_PORT", "3333"},
                                            {"GLMC_SERVED_NAME", "from env"},
                                            {"NCCL_IB_HCA", "rocep1s0f0"},
                                            {"GLM_CPU_THREADS", "4"},
                                            {"HOME", "/home/u"}};
  Expected<UpSettings> s = resolve({"--served-name", "from flag"}, env);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->get("served-name"), "from flag");
  EXPECT_EQ(s->source("served-name"), SettingSource::CommandLine);
  EXPECT_EQ(s->get("tp-port"), "3333");
  EXPECT_EQ(s->source("tp-port"), SettingSource::Environment);
  EXPECT_EQ(s->get("port"), "1111");
  EXPECT_EQ(s->source("port"), SettingSource::File);
  EXPECT_EQ(s->get("host"), "0.0.0.0");
  EXPECT_EQ(s->get("target"), "sm_121a");
  EXPECT_EQ(s->source("target"), SettingSource::Default);
  EXPECT_EQ(s->get("run-dir"), "/home/u/.local/state/glmc/up"); // ~ is the user's home
  EXPECT_FALSE(s->isSet("worker"));
  // NCCL_IB_HCA is a setting (both ranks get it from the launcher); the others pass as they are.
  EXPECT_EQ(s->get("nccl-ib-hca"), "rocep1s0f0");
  EXPECT_EQ(s->rankEnvironment().at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(s->rankEnvironment().at("GLM_CPU_THREADS"), "4");
  EXPECT_EQ(s->rankEnvironment().count("NCCL_IB_HCA"), 0u);
  fs::remove_all(dir);
}

TEST(UpSettings, EveryOptionListsItsEnvironmentNameAndDefaultInHelp) {
  CommandLine cl("glmc up", "", "");
  UpSettings::declareOptions(cl);
  const std::string help = cl.helpText();
  for (const UpSettingSpec &spec : upSettingSpecs()) {
    EXPECT_HAS(help, strCat("--", spec.option)) << spec.option;
    EXPECT_HAS(help, spec.env) << spec.option;
    if (spec.defaultValue != nullptr && *spec.defaultValue != '\0') {
      EXPECT_HAS(help, strCat(spec.env, ", default ", spec.defaultValue));
    }
  }
}

TEST(UpSettings, TyposAreRefusedWhereverTheyAre) {
  Expected<UpSettings> env = resolve({}, {{"GLMC_WORKR", "spark2"}});
  ASSERT_FALSE(env.ok());
  EXPECT_HAS(env.status().message(), "unknown setting GLMC_WORKR in the environment");

  Expected<std::map<std::string, std::string>> file =
      parseUpEnvFile("GLMC_WORKER=a\nGLMC_PROT=1\n", "glmc-up.env");
  ASSERT_FALSE(file.ok());
  EXPECT_HAS(file.status().message(), "glmc-up.env:2: unknown setting GLMC_PROT");
  EXPECT_HAS(parseUpEnvFile("PATH=/bin\n", "f").status().message(), "f:1: unknown");
  EXPECT_HAS(parseUpEnvFile("GLMC_PORT\n", "f").status().message(), "f:1: expected KEY=VALUE");
  EXPECT_HAS(parseUpEnvFile("GLMC_PORT=1\nGLMC_PORT=2\n", "f").status().message(),
             "f:2: GLMC_PORT is set twice");
  EXPECT_HAS(parseUpEnvFile("GLMC_API_KEY=\"abc\n", "f").status().message(),
             "opens a quote it does not close");

  Expected<UpSettings> missing = resolve({"--env-file", "/nonexistent/glmc-up.env"}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_HAS(missing.status().message(), "/nonexistent/glmc-up.env");

  Expected<UpSettings> flag = resolve({}, {{"GLMC_FOREGROUND", "yes"}});
  ASSERT_FALSE(flag.ok());
  EXPECT_HAS(flag.status().message(), "--foreground (GLMC_FOREGROUND) is 0 or 1");

  Expected<UpSettings> port = resolve({}, {{"GLMC_PORT", "80a"}});
  ASSERT_TRUE(port.ok());
  EXPECT_HAS(port->getInt("port", 1, 65535).status().message(),
             "--port (GLMC_PORT) must be an integer, got '80a' (from the environment)");
}

TEST(PlanMemory, ParsesMeminfoAndSizes) {
  Expected<uint64_t> bytes =
      parseMemAvailable("MemTotal: 131072 kB\nMemFree: 1 kB\nMemAvailable:  2048 kB\n");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, 2048u * 1024u);
  EXPECT_FALSE(parseMemAvailable("MemTotal: 1 kB\n").ok());
  EXPECT_TRUE(hostMemAvailable().ok()); // this machine's /proc/meminfo
  EXPECT_EQ(*parseByteSize("8G"), uint64_t(8) << 30);
  EXPECT_EQ(*parseByteSize("512MiB"), uint64_t(512) << 20);
  EXPECT_EQ(*parseByteSize("1.5K"), 1536u);
  EXPECT_EQ(*parseByteSize("4096"), 4096u);
  EXPECT_FALSE(parseByteSize("eight").ok());
  EXPECT_FALSE(parseByteSize("-1G").ok());
  EXPECT_FALSE(parseByteSize("").ok());
}

PlanMemory fakePlan() {
  PlanMemory m;
  m.pageBytes = 1 << 20; // 1 MiB per 64 tokens
  m.pageTokens = 64;
  m.maxSequences = 4;
  m.maxContext = 64 * 1000;
  m.pageCount = 1000 + 4;
  m.poolBytes = m.pageCount * m.pageBytes;
  m.perRankBytes = (uint64_t(10) << 30) + m.poolBytes; // 10 GiB fixed
  m.alignment = 256;
  m.unifiedMemory = true;
  m.target = "sm_121a";
  return m;
}

TEST(PlanMemory, TheLargestWindowThatFitsIsWhatThePoolCanHold) {
  const PlanMemory m = fakePlan();
  EXPECT_DOUBLE_EQ(m.stateBytesPerToken(), 16384.0);
  // 10 GiB fixed, then 504 pages: 4 for the sequences' spare pages, 500 * 64 tokens of window.
  EXPECT_EQ(largestFittingContext(m, (uint64_t(10) << 30) + 504 * m.pageBytes + 256), 32000u);
  EXPECT_EQ(largestFittingContext(m, (uint64_t(10) << 30) + 504 * m.pageBytes), 31936u);
  EXPECT_EQ(largestFittingContext(m, (uint64_t(10) << 30) + 4 * m.pageBytes + 256),
            std::nullopt); // the spare pages alone
  EXPECT_EQ(largestFittingContext(m, uint64_t(1) << 30), std::nullopt);
  PlanMemory unpaged = m;
  unpaged.pageBytes = 0;
  unpaged.poolBytes = 0;
  EXPECT_EQ(largestFittingContext(unpaged, unpaged.perRankBytes), m.maxContext);
  EXPECT_EQ(largestFittingContext(unpaged, unpaged.perRankBytes - 1), std::nullopt);
}

TEST(PlanMemory, ARefusalNamesTheFiguresAndTheWindowThatFits) {
  const PlanMemory m = fakePlan();
  const uint64_t reserve = uint64_t(8) << 30;
  EXPECT_TRUE(checkMemoryFits(m, 1, m.perRankBytes + reserve, reserve, "spark1").ok());
  const uint64_t available = reserve + (uint64_t(10) << 30) + 504 * m.pageBytes + 256;
  Status s = checkMemoryFits(m, 1, available, reserve, "spark1");
  ASSERT_FALSE(s.ok());
  EXPECT_HAS(s.message(), "spark1: not enough memory");
  EXPECT_HAS(s.message(), "plus the 8.00 GiB host reserve");
  EXPECT_HAS(s.message(), "a 64000-token window, a pool of 64000 tokens");
  EXPECT_HAS(s.message(), "the largest --max-context that fits is 32000 tokens");
  EXPECT_HAS(s.message(), "(with --pool-tokens 32000)");
  EXPECT_HAS(s.message(), "the pool costs 16384 bytes per token per rank");
  // Two ranks on one machine halve each one's share.
  Status two = checkMemoryFits(m, 2, reserve + 2 * ((uint64_t(10) << 30) + 504 * m.pageBytes + 256),
                               reserve, "here");
  EXPECT_HAS(two.message(), "2 ranks of");
  EXPECT_HAS(two.message(), "fits is 32000 tokens");
  Status none = checkMemoryFits(m, 1, reserve + (uint64_t(5) << 30), reserve, "spark2");
  EXPECT_HAS(none.message(), "Not even the smallest window fits");
}

/// Compiles the tiny fixture's CPU TP 2 plan with a pool of `pool` tokens (a 4096-token window).
std::unique_ptr<runtime::PlanFile> tinyPlan(const fs::path &dir, int pool) {
  const fs::path out = dir / strCat("tiny-", pool, ".glmp");
  const std::string command =
      strCat(GLM_GLMC_PATH, " compile ", GLM_FIXTURES_DIR, "/glm53-tiny -o ", out.string(),
             " --target cpu --tp 2 --max-context 4096 --pool-tokens ", pool, " 2>/dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(out);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? std::move(plan).value() : nullptr;
}

TEST(PlanMemory, ThePoolFormulaPredictsTheCompilersPlans) {
  const fs::path dir = tempDir("plans");
  std::unique_ptr<runtime::PlanFile> small = tinyPlan(dir, 4096);
  std::unique_ptr<runtime::PlanFile> large = tinyPlan(dir, 65536);
  ASSERT_TRUE(small && large);
  const PlanMemory s = planMemory(small->root()), l = planMemory(large->root());
  EXPECT_EQ(s.target, "cpu");
  EXPECT_TRUE(s.unifiedMemory);
  EXPECT_GT(s.pageBytes, 0u);
  EXPECT_EQ(s.maxContext, 4096u);
  EXPECT_EQ(s.poolTokens(), 4096u);
  EXPECT_EQ(l.poolTokens(), 65536u);
  EXPECT_EQ(s.fixedBytes(), l.fixedBytes()); // the pool moves nothing else
  EXPECT_GT(l.perRankBytes, s.perRankBytes);
  // The large plan's rank, as the budget of the small plan, holds the large plan's pool.
  const std::optional<uint64_t> fits = largestFittingContext(s, l.rankBytes() + s.alignment);
  ASSERT_TRUE(fits);
  EXPECT_EQ(*fits, 65536u);
  EXPECT_LT(*largestFittingContext(s, l.rankBytes() - 1), 65536u);
  // A refusal names the pool that fits, keeping the window.
  Status refused = checkMemoryFits(l, 1, s.rankBytes() + s.alignment + 100, 100, "here");
  EXPECT_HAS(refused.message(), "The largest pool that fits is --pool-tokens 4096");
  fs::remove_all(dir);
}

TEST(PlanMemory, KeptPromptStatesAndCheckpointsAreCountedBesideTheArenas) {
  const fs::path dir = tempDir("kept");
  std::unique_ptr<runtime::PlanFile> plan = tinyPlan(dir, 4096);
  ASSERT_TRUE(plan);
  PlanMemory m = planMemory(plan->root());
  // Serve's default, and one copy of a sequence's unpaged states (KDA, conv, ...) each; the
  // default plan verifies windows, so each sequence has a checkpoint of the same states too.
  EXPECT_EQ(m.keptStates, kKeptStatesPerSequence * m.maxSequences);
  EXPECT_EQ(m.checkpoints, m.maxSequences);
  ASSERT_GT(m.keptStateBytes, 0u);
  EXPECT_EQ(m.rankBytes(), m.perRankBytes + (m.keptStates + m.checkpoints) * m.keptStateBytes);
  // Memory for the arenas alone is refused while the kept states do not fit, and names them.
  const uint64_t reserve = 1 << 20;
  Status s = checkMemoryFits(m, 2, 2 * m.perRankBytes + reserve, reserve, "here");
  ASSERT_FALSE(s.ok());
  EXPECT_HAS(s.message(), strCat(m.keptStates, " kept prompt states of"));
  EXPECT_HAS(s.message(), "(--kept-states)");
  EXPECT_TRUE(checkMemoryFits(m, 2, 2 * m.rankBytes() + reserve, reserve, "here").ok());
  // --kept-states 0 needs the arenas and the checkpoints.
  m.keptStates = 0;
  EXPECT_HAS(checkMemoryFits(m, 2, 2 * m.perRankBytes + reserve, reserve, "here").message(),
             strCat(m.checkpoints, " verify-window checkpoints of"));
  EXPECT_TRUE(checkMemoryFits(m, 2, 2 * m.rankBytes() + reserve, reserve, "here").ok());
  fs::remove_all(dir);
}

MachineFacts machine(const std::string &host) {
  MachineFacts f;
  f.hostname = host;
  f.bootId = host + "-boot";
  f.memAvailable = uint64_t(100) << 30;
  f.planFormat = 6;
  f.gpus = {{"NVIDIA GB10", "sm_121a", uint64_t(128) << 30}};
  f.checkpoint.dir = "/models/glm";
  f.checkpoint.hashMode = "sampled";
  f.checkpoint.files = {{"config.json", 4000, "aa11"}, {"model-00001.safetensors", 5000, "bb22"}};
  f.interfaces = {{"lo", "127.0.0.1", true},
                  {"lo", "10.0.0.1", true}, // an alias on lo
                  {"enp1s0f0np0", "192.168.100.10", false}};
  return f;
}

TEST(UpChecks, TheWorkersCheckpointMustBeTheSame) {
  const MachineNames names;
  MachineFacts head = machine("spark1"), worker = machine("spark2");
  EXPECT_TRUE(checkCheckpoint(head, worker, names).ok());

  MachineFacts w = worker;
  w.checkpoint.error = "does not exist";
  EXPECT_HAS(checkCheckpoint(head, w, names).message(),
             "the checkpoint /models/glm on the worker does not exist: copy it there");
  w = worker;
  w.checkpoint.files.pop_back();
  EXPECT_HAS(checkCheckpoint(head, w, names).message(), "lacks model-00001.safetensors");
  w = worker;
  w.checkpoint.files[1].size = 4999;
  EXPECT_HAS(checkCheckpoint(head, w, names).message(),
             "model-00001.safetensors is 4999 bytes, 5000 on this machine");
  w = worker;
  w.checkpoint.files[1].hash = "cc33";
  EXPECT_HAS(checkCheckpoint(head, w, names).message(), "has the same size but other bytes");
  w = worker;
  w.checkpoint.files.push_back({"model-00002.safetensors", 1, "dd"});
  EXPECT_HAS(checkCheckpoint(head, w, names).message(), "different checkpoints");
  MachineFacts h = head;
  h.checkpoint.error = "is not a directory";
  EXPECT_HAS(checkCheckpoint(h, worker, names).message(), "is not a directory");
}

TEST(UpChecks, AGpuPlanNeedsItsGpu) {
  PlanMemory plan = fakePlan();
  MachineFacts f = machine("spark1");
  EXPECT_TRUE(checkGpu(plan, f, "spark1").ok());
  f.gpus.clear();
  f.gpuError = "cannot load libcuda.so.1";
  EXPECT_HAS(checkGpu(plan, f, "spark1").message(),
             "spark1 has no CUDA GPU for the sm_121a plan (cannot load libcuda.so.1)");
  f.gpus = {{"NVIDIA H200", "sm_90a", uint64_t(141) << 30}};
  EXPECT_HAS(checkGpu(plan, f, "spark1").message(), "set --target / GLMC_TARGET to sm_90a");
  plan.target = "cpu";
  f.gpus.clear();
  EXPECT_TRUE(checkGpu(plan, f, "spark1").ok());
}

TEST(UpChecks, MemoryOnEachMachine) {
  const PlanMemory plan = fakePlan();
  MachineFacts f = machine("spark2");
  EXPECT_TRUE(checkMachineMemory(plan, f, 1, uint64_t(8) << 30, "the worker").ok());
  f.memAvailable = uint64_t(11) << 30;
  EXPECT_HAS(checkMachineMemory(plan, f, 1, uint64_t(1) << 30, "the worker").message(),
             "the worker: not enough memory");
  f.memError = "/proc/meminfo: cannot be read";
  EXPECT_HAS(checkMachineMemory(plan, f, 1, 0, "the worker").message(),
             "the free memory is unknown");
  // A discrete GPU's plan: the device holds the rank.
  PlanMemory discrete = plan;
  discrete.unifiedMemory = false;
  discrete.target = "sm_90a";
  MachineFacts h200 = machine("h200");
  h200.gpus = {{"NVIDIA H200", "sm_90a", uint64_t(8) << 30}};
  EXPECT_HAS(checkMachineMemory(discrete, h200, 1, 0, "h200").message(),
             "h200's GPU (NVIDIA H200): not enough memory");
}

TEST(UpChecks, PortsAndBuilds) {
  MachineFacts head = machine("spark1");
  head.portsInUse = {8888};
  const std::vector<std::string> names = {"--port (GLMC_PORT)", "--tp-port (GLMC_TP_PORT)"};
  EXPECT_HAS(checkPortsFree(head, {8888, 29551}, names, {}).message(),
             "port 8888 (--port (GLMC_PORT)) is already in use on this machine");
  EXPECT_TRUE(checkPortsFree(head, {8888, 29551}, names, {8888, 29551}).ok()); // a restart's own
  EXPECT_HAS(checkPortsFree(head, {9000, 9000}, names, {}).message(), "both 9000");
  MachineFacts worker = machine("spark2");
  worker.planFormat = 5;
  EXPECT_HAS(checkSameBuild(head, worker, {}).message(),
             "reads plan format 5 and this machine's writes format 6");
}

TEST(UpChecks, NoLoopbackBetweenTwoMachines) {
  const MachineFacts head = machine("spark1"), worker = machine("spark2");
  const MachineNames names;
  EXPECT_TRUE(checkNoLoopback(true, "192.168.100.10", {"192.168.100.10"}, "enp1s0f0np0", head,
                              worker, names)
                  .ok());
  EXPECT_HAS(checkNoLoopback(true, "127.0.1.1", {"127.0.1.1"}, "", head, worker, names).message(),
             "the head address 127.0.1.1 is a loopback address");
  EXPECT_HAS(checkNoLoopback(true, "spark1-cx7", {"127.0.1.1"}, "", head, worker, names).message(),
             "the head address spark1-cx7 (127.0.1.1) is a loopback address");
  EXPECT_HAS(checkNoLoopback(true, "10.0.0.1", {"10.0.0.1"}, "", head, worker, names).message(),
             "held by the loopback interface lo on this machine (an alias on lo)");
  for (const char *ifname : {"lo", "=lo", "enp,lo", "l"}) {
    EXPECT_HAS(
        checkNoLoopback(true, "192.168.100.10", {"192.168.100.10"}, ifname, head, worker, names)
            .message(),
        "selects the loopback interface lo")
        << ifname;
  }
  EXPECT_TRUE(
      checkNoLoopback(true, "192.168.100.10", {"192.168.100.10"}, "^lo,docker", head, worker, names)
          .ok());
  EXPECT_TRUE(checkNoLoopback(true, "192.168.100.10", {"192.168.100.10"}, "=enp1s0f0np0", head,
                              worker, names)
                  .ok());
  // One machine for both ranks: loopback is the link.
  EXPECT_TRUE(checkNoLoopback(false, "127.0.0.1", {"127.0.0.1"}, "lo", head, worker, names).ok());
  EXPECT_TRUE(isLoopbackAddress("::1"));
  EXPECT_TRUE(isLoopbackAddress("::ffff:127.0.0.1"));
  EXPECT_FALSE(isLoopbackAddress("128.0.0.1"));
  EXPECT_FALSE(isLoopbackAddress("spark"));
}

TEST(UpFacts, TravelAsJsonPastALoginBanner) {
  MachineFacts f = machine("spark2");
  f.portsInUse = {22};
  f.runDir = "/home/u/.local/state/glmc/up";
  const std::string text = "Welcome to DGX OS\n" + toJson(f).dump() + "\n";
  Expected<MachineFacts> back = machineFactsFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->bootId, f.bootId);
  EXPECT_EQ(back->memAvailable, f.memAvailable);
  ASSERT_EQ(back->gpus.size(), 1u);
  EXPECT_EQ(back->gpus[0].arch, "sm_121a");
  ASSERT_EQ(back->checkpoint.files.size(), 2u);
  EXPECT_EQ(back->checkpoint.files[1].hash, "bb22");
  EXPECT_EQ(back->interfaces[1].loopback, true);
  EXPECT_EQ(back->portsInUse, std::vector<int>{22});
  EXPECT_HAS(machineFactsFromJson("bash: glmc: command not found").status().message(),
             "printed no JSON facts");
  EXPECT_HAS(machineFactsFromJson("{\"hostname\": \"x\"}").status().message(), "same build");
}

TEST(UpFacts, CheckpointHashesSeeBytesAndSizes) {
  const fs::path a = tempDir("ckpt-a"), b = tempDir("ckpt-b");
  for (const fs::path &dir : {a, b}) {
    std::ofstream(dir / "config.json") << "{\"x\": 1}";
    std::ofstream(dir / "README.md") << "not compared";
    std::string big((70 << 20) + 123, 'w'); // past the whole-file size: sampled
    std::ofstream(dir / "model.safetensors", std::ios::binary) << big;
  }
  std::ofstream(b / "README.md") << "another readme";
  const CheckpointFacts fa = checkpointFacts(a.string(), "sampled", "");
  CheckpointFacts fb = checkpointFacts(b.string(), "sampled", "");
  ASSERT_TRUE(fa.error.empty()) << fa.error;
  ASSERT_EQ(fa.files.size(), 2u); // README.md is not a file the ranks read
  EXPECT_TRUE(checkCheckpoint(machine("a"), machine("b"), {}).ok());
  MachineFacts ha = machine("a"), hb = machine("b");
  ha.checkpoint = fa;
  hb.checkpoint = fb;
  EXPECT_TRUE(checkCheckpoint(ha, hb, {}).ok());
  {
    // One byte changed inside the last sampled block.
    std::fstream f(b / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((70 << 20) + 100);
    f.put('x');
  }
  hb.checkpoint = checkpointFacts(b.string(), "sampled", "");
  EXPECT_HAS(checkCheckpoint(ha, hb, {}).message(), "same size but other bytes");
  const fs::path cache = tempDir("hash-cache");
  const CheckpointFacts full = checkpointFacts(b.string(), "full", cache.string());
  EXPECT_TRUE(fs::exists(cache / "checkpoint-hashes.json"));
  EXPECT_EQ(checkpointFacts(b.string(), "full", cache.string()).files[1].hash,
            full.files[1].hash); // from the cache
  EXPECT_NE(full.files[1].hash, hb.checkpoint.files[1].hash);
  EXPECT_EQ(checkpointFacts((a / "missing").string(), "sampled", "").error, "does not exist");
  for (const fs::path &dir : {a, b, cache}) {
    fs::remove_all(dir);
  }
}

TEST(UpProcess, StateRoundTripsAndQuotingHolds) {
  UpState s;
  s.headPid = 12;
  s.workerDestination = "u@spark2";
  s.sshOptions = {"-p", "2222"};
  s.workerPid = 34;
  s.workerPlan = "/r/worker-plan.glmp";
  s.port = 8888;
  s.servedName = "GLM-5.3-Flash";
  const fs::path dir = tempDir("state");
  ASSERT_TRUE(saveUpState(dir.string(), s).ok());
  EXPECT_EQ(fs::status(upStatePath(dir.string())).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  Expected<std::optional<UpState>> back = loadUpState(dir.string());
  ASSERT_TRUE(back.ok() && *back);
  EXPECT_EQ((*back)->workerPid, 34);
  EXPECT_EQ((*back)->sshOptions, s.sshOptions);
  EXPECT_EQ((*back)->servedName, "GLM-5.3-Flash");
  ASSERT_TRUE(removeUpState(dir.string()).ok());
  EXPECT_FALSE(*loadUpState(dir.string()));
  {
    Expected<RunLock> first = RunLock::acquire(dir.string());
    ASSERT_TRUE(first.ok());
    EXPECT_HAS(RunLock::acquire(dir.string()).status().message(),
               "another `glmc up` is changing what runs");
  }
  EXPECT_TRUE(RunLock::acquire(dir.string()).ok());
  fs::remove_all(dir);

  EXPECT_EQ(shellQuote("/a/b.glmp"), "/a/b.glmp");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  Expected<CommandResult> echoed =
      runCommand({"sh", "-c", strCat("printf %s ", shellQuote("a 'b' $c"))});
  ASSERT_TRUE(echoed.ok());
  EXPECT_EQ(echoed->out, "a 'b' $c");
  Expected<CommandResult> fed = runCommand({"cat"}, "stdin bytes");
  EXPECT_EQ(fed->out, "stdin bytes");
  EXPECT_EQ(runCommand({"sh", "-c", "exit 7"})->exitCode, 7);

  LineBuffer lines;
  const std::string chunk = "one\nrank 0: weights 10%\rrank 0: weights 20%\npart";
  lines.append(chunk.data(), chunk.size());
  EXPECT_EQ(*lines.next(), "one");
  EXPECT_EQ(*lines.next(), "rank 0: weights 20%"); // a redrawn bar shows its latest state
  EXPECT_FALSE(lines.next());
  EXPECT_EQ(lines.rest(), "part");

  const Remote remote("u@spark2", Remote::splitOptions("  -p 2222   -i /k "));
  EXPECT_EQ(remote.host(), "spark2");
  const std::vector<std::string> argv = remote.argv("true");
  EXPECT_EQ(argv.front(), "ssh");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "BatchMode=yes"), argv.end());
  EXPECT_EQ(argv[argv.size() - 2], "u@spark2");
  EXPECT_EQ(argv[argv.size() - 4], "-i");
}

} // namespace
} // namespace glm::tools
