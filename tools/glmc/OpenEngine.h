// The backend a plan was compiled for: the CPU reference engine for `--target cpu` plans, the CUDA
// engine (graph replay on this machine's GPU) for sm_90a / sm_121a plans; for a tensor-parallel
// plan, one engine per rank behind a LockstepEngine.
#pragma once

#include "runtime/comm/TcpComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/SafeTensors.h"

#include <memory>
#include <optional>
#include <string>

namespace glm::tools {

/// `cpuOptions` configures the CPU engine; a GPU plan refuses the CPU-only ones (tensor dumps,
/// the torch tie rule) rather than ignoring them. A TP N plan runs its N ranks as threads of this
/// process (LockstepEngine::createInProcess over a LoopbackGroup); a GPU plan's ranks all run on
/// device 0, which must hold N ranks' arenas. Tensor dumps come from rank 0.
Expected<std::unique_ptr<runtime::Engine>>
openEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
           const runtime::CpuEngineOptions &cpuOptions = {});

/// --tp-timeout SECONDS of `glmc serve --tp-listen` and `glmc worker`: how long a silent peer may
/// keep a collective waiting before it fails (default 30). Rank 0 pings idle workers every second,
/// so it must be at least kMinTpTimeoutS.
constexpr int64_t kMinTpTimeoutS = 2, kMaxTpTimeoutS = 86400;
runtime::TcpCommOptions tpTimeoutOption(std::optional<int64_t> seconds);

/// Rank 0 of a tensor-parallel group across processes (`glmc serve --tp-listen`): listens on
/// `listenAddress` (HOST:PORT) for the `glmc worker` ranks and returns a LockstepEngine over rank
/// 0's CPU engine. It serves once every worker has joined (Engine::health says who is missing).
/// `comm` bounds how long a silent worker may keep a call waiting (TcpCommOptions::timeoutMs).
Expected<std::unique_ptr<runtime::Engine>>
openLockstepEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
                   const std::string &listenAddress, runtime::TcpCommOptions comm = {});

} // namespace glm::tools
