// Choosing the engine by the plan's target, and running a tensor-parallel plan's ranks.
#include "tools/glmc/OpenEngine.h"

#include "runtime/comm/NcclComm.h"
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/CudaEngine.h"
#include "runtime/engine/LockstepEngine.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

namespace glm::tools {

namespace {

/// One rank's engine of `plan` (of a TP 1 plan when `comm` is null). A GPU rank with an NCCL
/// communicator runs on that communicator's device and owns it; otherwise it runs on device 0
/// and exchanges through `comm`.
Expected<std::unique_ptr<runtime::Engine>>
rankEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
           runtime::CpuEngineOptions cpuOptions, runtime::LoopbackComm *comm,
           std::shared_ptr<runtime::NcclComm> nccl = nullptr) {
  if (plan->root().target()->arch() == plan::Arch::Cpu) {
    cpuOptions.comm = comm;
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::CpuEngine> engine,
                         runtime::CpuEngine::create(std::move(plan), checkpoint, cpuOptions));
    return std::unique_ptr<runtime::Engine>(std::move(engine));
  }
  cuda::CudaEngineOptions options;
  options.comm = comm;
  options.weights = cpuOptions.weights;
  if (nccl != nullptr) {
    options.device = nccl->rank();
    options.comm = nccl.get();
    options.keepAlive = nccl;
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaEngine> engine,
                       cuda::CudaEngine::create(std::move(plan), checkpoint, options));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

} // namespace

Expected<bool> rankPerDevice(int world) {
  const char *env = std::getenv("GLM_TP_DEVICES");
  const std::string mode = env != nullptr ? env : "";
  if (!mode.empty() && mode != "one" && mode != "each") {
    return invalidArgument("GLM_TP_DEVICES is one or each, got '", mode, "'");
  }
  if (mode == "one") {
    return false;
  }
  Expected<int> devices = cuda::CudaContext::deviceCount();
  Expected<int> nccl = runtime::ncclVersion();
  const bool possible = devices.ok() && *devices >= world && nccl.ok();
  if (mode == "each" && !possible) {
    return Status(StatusCode::Unavailable,
                  strCat("GLM_TP_DEVICES=each needs ", world, " CUDA devices and NCCL: ",
                         devices.ok() ? strCat(*devices, " devices") : devices.status().message(),
                         ", ", nccl.ok() ? "NCCL loads" : nccl.status().message()));
  }
  return possible;
}

Expected<std::vector<std::shared_ptr<runtime::NcclComm>>> ncclGroup(int world) {
  runtime::LoopbackGroup control(world);
  std::vector<std::shared_ptr<runtime::NcclComm>> comms(world);
  std::vector<Status> errors(world, Status::success());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<runtime::LoopbackComm> comm = control.comm(r);
      Expected<std::unique_ptr<runtime::NcclComm>> made = runtime::NcclComm::create(*comm, r);
      if (made.ok()) {
        comms[r] = std::move(made).value();
      } else {
        errors[r] = made.status();
        control.end(strCat("rank ", r, ": ", made.status().message()));
      }
    });
  }
  for (std::thread &t : threads) {
    t.join();
  }
  for (int r = 0; r < world; ++r) {
    GLM_RETURN_IF_ERROR(errors[r].withContext(strCat("NCCL rank ", r, " of ", world)));
  }
  return comms;
}

Expected<std::unique_ptr<runtime::Engine>> openEngine(std::unique_ptr<runtime::PlanFile> plan,
                                                      const Checkpoint &checkpoint,
                                                      const runtime::CpuEngineOptions &cpuOptions) {
  if (plan->root().target()->arch() != plan::Arch::Cpu) {
    if (!cpuOptions.dumpPattern.empty()) {
      return invalidArgument("tensor dumps (--dump-tensors, GLM_DUMP) run on the CPU backend: "
                             "compile the plan with --target cpu");
    }
    if (cpuOptions.tieRule != kernels::TopkTieRule::LowerIndex) {
      return invalidArgument("--tie-rule torch-cpu runs on the CPU backend: compile the plan "
                             "with --target cpu");
    }
  }
  const int world = static_cast<int>(plan->root().tp());
  if (world == 1) {
    return rankEngine(std::move(plan), checkpoint, cpuOptions, nullptr);
  }
  // A TP N plan on this machine alone: its ranks as threads of this process, meeting in a
  // loopback group, rank 0 driving the others in lockstep. A GPU plan's ranks run one per device
  // over NCCL where there are enough devices, else all on device 0, exchanging through its memory.
  // Ranks in processes of their own are `glmc serve --tp-listen` with `glmc worker`.
  std::vector<std::shared_ptr<runtime::NcclComm>> nccl;
  if (plan->root().target()->arch() != plan::Arch::Cpu) {
    GLM_ASSIGN_OR_RETURN(bool perDevice, rankPerDevice(world));
    if (perDevice) {
      GLM_ASSIGN_OR_RETURN(nccl, ncclGroup(world));
    }
  }
  const std::vector<uint8_t> bytes(plan->bytes().begin(), plan->bytes().end());
  const std::string source = plan->source();
  auto make = [&](runtime::LoopbackComm &comm) -> Expected<std::unique_ptr<runtime::Engine>> {
    std::unique_ptr<runtime::PlanFile> rankPlan;
    runtime::CpuEngineOptions options = cpuOptions;
    if (comm.rank() == 0) {
      rankPlan = std::move(plan);
    } else {
      GLM_ASSIGN_OR_RETURN(rankPlan, runtime::PlanFile::fromBytes(bytes, source));
      options.dumpPattern.clear(); // rank 0's dumps only: the ranks' files would share names
    }
    return rankEngine(std::move(rankPlan), checkpoint, options, &comm,
                      nccl.empty() ? nullptr : nccl[comm.rank()]);
  };
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::LockstepEngine> engine,
                       runtime::LockstepEngine::createInProcess(world, make));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

runtime::TcpCommOptions tpTimeoutOption(std::optional<int64_t> seconds) {
  runtime::TcpCommOptions options;
  if (seconds) {
    options.timeoutMs = static_cast<int>(*seconds * 1000);
  }
  return options;
}

void addTpOptions(CommandLine &cl) {
  cl.option("tp-timeout", "S",
            "seconds a rank may be busy before the call in flight fails\n(default 30; a silent "
            "rank fails it after 5 s)")
      .option("tp-secret-file", "FILE",
              "the tensor-parallel group's shared secret, the file's contents (a\ntrailing "
              "newline dropped): each side proves it by HMAC-SHA256 over\nnonces")
      .option("tp-secret", "S",
              "the shared secret given inline (visible to other users in the\nprocess list: "
              "prefer --tp-secret-file)")
      .option("tp-hello-timeout", "S",
              "seconds rank 0 gives a new connection to prove the secret before it\ndrops it "
              "(default 5)");
}

Expected<runtime::TcpCommOptions> tpOptionsFrom(const CommandLine &cl) {
  GLM_ASSIGN_OR_RETURN(std::optional<int64_t> seconds,
                       cl.getInt("tp-timeout", kMinTpTimeoutS, kMaxTpTimeoutS));
  runtime::TcpCommOptions options = tpTimeoutOption(seconds);
  GLM_ASSIGN_OR_RETURN(std::optional<int64_t> hello, cl.getInt("tp-hello-timeout", 1, 3600));
  if (hello) {
    options.helloTimeoutMs = static_cast<int>(*hello * 1000);
  }
  if (cl.get("tp-secret") && cl.get("tp-secret-file")) {
    return invalidArgument("--tp-secret and --tp-secret-file are two ways to give one secret: "
                           "give one");
  }
  if (std::optional<std::string> secret = cl.get("tp-secret")) {
    options.secret = *secret;
  }
  if (std::optional<std::string> path = cl.get("tp-secret-file")) {
    std::ifstream in(*path, std::ios::binary);
    if (!in) {
      return invalidArgument("--tp-secret-file: cannot read ", *path);
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > (64u << 10)) {
      return invalidArgument("--tp-secret-file: ", *path, " holds more than 64 KiB");
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
      text.pop_back();
    }
    options.secret = std::move(text);
  }
  if ((cl.get("tp-secret") || cl.get("tp-secret-file")) && options.secret.size() < 16) {
    return invalidArgument("the tensor-parallel secret is ", options.secret.size(),
                           " bytes: give at least 16 (e.g. `head -c 32 /dev/urandom | base64`)");
  }
  return options;
}

Expected<ProcessRank> openProcessRank(std::unique_ptr<runtime::PlanFile> plan,
                                      const Checkpoint &checkpoint, runtime::TcpComm &comm,
                                      int device, runtime::DeviceTransport transport,
                                      const WeightLoadOptions &weights) {
  ProcessRank rank;
  if (plan->root().target()->arch() == plan::Arch::Cpu) {
    runtime::CpuEngineOptions options;
    options.comm = &comm;
    options.weights = weights;
    GLM_ASSIGN_OR_RETURN(rank.engine,
                         runtime::CpuEngine::create(std::move(plan), checkpoint, options));
    return rank;
  }
  // The engine holds the device communicator (keepAlive); the communicator's NCCL waits use
  // the TcpComm's timeout, which bounds every other wait of the rank too.
  auto deviceComm =
      std::make_shared<runtime::GroupDeviceComm>(comm, device, transport, comm.options().timeoutMs);
  cuda::CudaEngineOptions options;
  options.device = device;
  options.comm = deviceComm.get();
  options.keepAlive = deviceComm;
  options.weights = weights;
  GLM_ASSIGN_OR_RETURN(rank.engine, cuda::CudaEngine::create(std::move(plan), checkpoint, options));
  rank.formGroup = [group = deviceComm.get()](runtime::Comm &) { return group->form(); };
  return rank;
}

Expected<std::unique_ptr<runtime::Engine>>
openLockstepEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
                   const std::string &listenAddress, runtime::TcpCommOptions commOptions,
                   runtime::DeviceTransport transport, const WeightLoadOptions &weights) {
  const int world = static_cast<int>(plan->root().tp());
  if (world < 2) {
    return invalidArgument(plan->source(), " is a TP ", world,
                           " plan: --tp-listen is for plans compiled with --tp 2 or more");
  }
  if (plan->root().target()->arch() != plan::Arch::Cpu &&
      transport == runtime::DeviceTransport::Nccl) {
    // Found now, not when the first worker joins and the group cannot form.
    if (Expected<int> nccl = runtime::ncclVersion(); !nccl.ok()) {
      return nccl.status().withContext(
          "--tp-listen with a GPU plan (--tp-transport tcp needs no NCCL, and is slow)");
    }
  }
  GLM_ASSIGN_OR_RETURN(auto address, runtime::parseHostPort(listenAddress));
  const std::string identity = runtime::lockstepIdentity(*plan, checkpoint, weights.ablation);
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::TcpComm> comm,
                       runtime::TcpComm::listen(address.first, address.second, world, commOptions));
  // Rank 0's load also digests every worker's part of the checkpoint, which the workers' own
  // digests must equal.
  std::vector<uint32_t> ranks;
  for (int r = 1; r < world; ++r) {
    ranks.push_back(static_cast<uint32_t>(r));
  }
  WeightDigest digest(ranks);
  WeightLoadOptions load = weights;
  load.digest = &digest;
  GLM_ASSIGN_OR_RETURN(ProcessRank rank,
                       openProcessRank(std::move(plan), checkpoint, *comm, 0, transport, load));
  runtime::LockstepOptions options;
  options.formGroup = std::move(rank.formGroup);
  for (int r = 0; r < world; ++r) {
    options.weightDigests.push_back(digest.hex(static_cast<uint32_t>(r)));
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::LockstepEngine> engine,
                       runtime::LockstepEngine::create(std::move(comm), std::move(rank.engine),
                                                       identity, std::move(options)));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

} // namespace glm::tools
