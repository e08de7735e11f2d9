// Choosing the engine by the plan's target, and running a tensor-parallel plan's ranks.
#include "tools/glmc/OpenEngine.h"

#include "runtime/comm/TcpComm.h"
#include "runtime/cuda/CudaEngine.h"
#include "runtime/engine/LockstepEngine.h"

namespace glm::tools {

namespace {

/// One rank's engine of `plan` (of a TP 1 plan when `comm` is null).
Expected<std::unique_ptr<runtime::Engine>> rankEngine(std::unique_ptr<runtime::PlanFile> plan,
                                                      const Checkpoint &checkpoint,
                                                      runtime::CpuEngineOptions cpuOptions,
                                                      runtime::LoopbackComm *comm) {
  if (plan->root().target()->arch() == plan::Arch::Cpu) {
    cpuOptions.comm = comm;
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::CpuEngine> engine,
                         runtime::CpuEngine::create(std::move(plan), checkpoint, cpuOptions));
    return std::unique_ptr<runtime::Engine>(std::move(engine));
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaEngine> engine,
                       cuda::CudaEngine::create(std::move(plan), checkpoint, {.comm = comm}));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

} // namespace

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
  // loopback group (a GPU plan's ranks all on device 0, exchanging through its memory), rank 0
  // driving the others in lockstep. Ranks in processes of their own are `glmc serve --tp-listen`
  // with `glmc worker`.
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
    return rankEngine(std::move(rankPlan), checkpoint, options, &comm);
  };
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::LockstepEngine> engine,
                       runtime::LockstepEngine::createInProcess(world, make));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

Expected<std::unique_ptr<runtime::Engine>>
openLockstepEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
                   const std::string &listenAddress) {
  // The workers' side (`glmc worker`) runs the CPU engine, so ranks in separate processes do too;
  // a GPU plan's ranks run as threads of one process (openEngine) until the workers run
  // CudaEngine over NcclComm.
  if (plan->root().target()->arch() != plan::Arch::Cpu) {
    return invalidArgument(plan->source(),
                           ": tensor parallelism across processes runs plans compiled with "
                           "--target cpu for now (without --tp-listen, a GPU plan's ranks run "
                           "as threads of this process on device 0)");
  }
  const int world = static_cast<int>(plan->root().tp());
  if (world < 2) {
    return invalidArgument(plan->source(), " is a TP ", world,
                           " plan: --tp-listen is for plans compiled with --tp 2 or more");
  }
  GLM_ASSIGN_OR_RETURN(auto address, runtime::parseHostPort(listenAddress));
  const std::string identity = runtime::lockstepIdentity(*plan, checkpoint);
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::TcpComm> comm,
                       runtime::TcpComm::listen(address.first, address.second, world));
  runtime::CpuEngineOptions options;
  options.comm = comm.get();
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::CpuEngine> local,
                       runtime::CpuEngine::create(std::move(plan), checkpoint, options));
  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::LockstepEngine> engine,
      runtime::LockstepEngine::create(std::move(comm), std::move(local), identity));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

} // namespace glm::tools
