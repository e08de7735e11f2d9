// Choosing the engine by the plan's target.
#include "tools/glmc/OpenEngine.h"

#include "runtime/comm/TcpComm.h"
#include "runtime/cuda/CudaEngine.h"
#include "runtime/engine/LockstepEngine.h"

namespace glm::tools {

Expected<std::unique_ptr<runtime::Engine>> openEngine(std::unique_ptr<runtime::PlanFile> plan,
                                                      const Checkpoint &checkpoint,
                                                      const runtime::CpuEngineOptions &cpuOptions) {
  if (plan->root().target()->arch() == plan::Arch::Cpu) {
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::CpuEngine> engine,
                         runtime::CpuEngine::create(std::move(plan), checkpoint, cpuOptions));
    return std::unique_ptr<runtime::Engine>(std::move(engine));
  }
  if (!cpuOptions.dumpPattern.empty()) {
    return invalidArgument("tensor dumps (--dump-tensors, GLM_DUMP) run on the CPU backend: "
                           "compile the plan with --target cpu");
  }
  if (cpuOptions.tieRule != kernels::TopkTieRule::LowerIndex) {
    return invalidArgument("--tie-rule torch-cpu runs on the CPU backend: compile the plan with "
                           "--target cpu");
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaEngine> engine,
                       cuda::CudaEngine::create(std::move(plan), checkpoint));
  return std::unique_ptr<runtime::Engine>(std::move(engine));
}

Expected<std::unique_ptr<runtime::Engine>>
openLockstepEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
                   const std::string &listenAddress) {
  // The GPU engine runs TP 1 plans only, so ranks in separate processes run the CPU engine.
  if (plan->root().target()->arch() != plan::Arch::Cpu) {
    return invalidArgument(plan->source(), ": tensor parallelism across processes runs plans "
                                           "compiled with --target cpu for now");
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
