// Choosing the engine by the plan's target.
#include "tools/glmc/OpenEngine.h"

#include "runtime/cuda/CudaEngine.h"

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

} // namespace glm::tools
