// The backend a plan was compiled for: the CPU reference engine for `--target cpu` plans, the CUDA
// engine (graph replay on this machine's GPU) for sm_90a / sm_121a plans.
#pragma once

#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/SafeTensors.h"

#include <memory>

namespace glm::tools {

/// `cpuOptions` configures the CPU engine; a GPU plan refuses the CPU-only ones (tensor dumps,
/// the torch tie rule) rather than ignoring them.
Expected<std::unique_ptr<runtime::Engine>>
openEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
           const runtime::CpuEngineOptions &cpuOptions = {});

} // namespace glm::tools
