// The backend a plan was compiled for: the CPU reference engine for `--target cpu` plans, the CUDA
// engine (graph replay on this machine's GPU) for sm_90a / sm_121a plans; for a tensor-parallel
// plan, one engine per rank behind a LockstepEngine.
#pragma once

#include "runtime/comm/GroupDeviceComm.h"
#include "runtime/comm/TcpComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/SafeTensors.h"
#include "tools/glmc/CommandLine.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace glm::runtime {
class NcclComm;
} // namespace glm::runtime

namespace glm::tools {

/// `cpuOptions` configures the CPU engine; a GPU plan refuses the CPU-only ones (tensor dumps,
/// the torch tie rule) rather than ignoring them. A TP N plan runs its N ranks as threads of this
/// process (LockstepEngine::createInProcess over a LoopbackGroup); a GPU plan's ranks run one per
/// device over NCCL where there are enough (rankPerDevice), else all on device 0, which must then
/// hold N ranks' arenas. Tensor dumps come from rank 0.
Expected<std::unique_ptr<runtime::Engine>>
openEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
           const runtime::CpuEngineOptions &cpuOptions = {});

/// Whether a GPU plan of `world` ranks runs one rank per device, over NCCL: when this process
/// sees at least `world` devices and NCCL loads, unless GLM_TP_DEVICES=one asks for every rank on
/// device 0 (the loopback; GLM_TP_DEVICES=each insists on a device per rank). openEngine's
/// choice, exposed so that `glmc bench` places a TP plan's ranks the same way.
Expected<bool> rankPerDevice(int world);

/// The NCCL communicators of a group of `world` ranks in this process, rank r on device r: NCCL
/// sets up only with every rank present, so the ranks join from threads of their own, exchanging
/// NCCL's id through a loopback group.
Expected<std::vector<std::shared_ptr<runtime::NcclComm>>> ncclGroup(int world);

/// --tp-timeout SECONDS of `glmc serve --tp-listen` and `glmc worker`: how long a collective may
/// wait on live peers before it fails (default 30; TcpCommOptions::timeoutMs). A peer that falls
/// silent, heartbeats included, fails it sooner (TcpCommOptions::silenceMs, 5 s or the timeout if
/// shorter). Rank 0 pings idle workers every second, so it must be at least kMinTpTimeoutS.
constexpr int64_t kMinTpTimeoutS = 2, kMaxTpTimeoutS = 86400;
runtime::TcpCommOptions tpTimeoutOption(std::optional<int64_t> seconds);
/// The tensor-parallel options `glmc serve --tp-listen` and `glmc worker` share: --tp-timeout,
/// --tp-secret / --tp-secret-file (TcpCommOptions::secret, at least 16 bytes) and
/// --tp-hello-timeout (TcpCommOptions::helloTimeoutMs).
void addTpOptions(CommandLine &cl);
Expected<runtime::TcpCommOptions> tpOptionsFrom(const CommandLine &cl);

/// One rank of a tensor-parallel group across processes: its engine over `comm` (this rank's
/// TcpComm, which must outlive it), and what the rank runs each time the group forms
/// (LockstepOptions::formGroup, runLockstepWorker's formGroup). A CPU plan's engine exchanges
/// through `comm` itself and needs nothing formed; a GPU plan's runs on CUDA device `device` over
/// a GroupDeviceComm, whose transport each formed group sets up (rank 0's `transport` is the
/// group's).
struct ProcessRank {
  std::unique_ptr<runtime::Engine> engine;
  std::function<Status(runtime::Comm &control)> formGroup;
};
Expected<ProcessRank> openProcessRank(std::unique_ptr<runtime::PlanFile> plan,
                                      const Checkpoint &checkpoint, runtime::TcpComm &comm,
                                      int device, runtime::DeviceTransport transport,
                                      const WeightLoadOptions &weights = {});

/// Rank 0 of a tensor-parallel group across processes (`glmc serve --tp-listen`): listens on
/// `listenAddress` (HOST:PORT) for the `glmc worker` ranks and returns a LockstepEngine over rank
/// 0's engine (openProcessRank, on device 0 for a GPU plan), whose load digests every rank's part
/// of the weights (a worker must present its own digest). It serves once every worker has
/// joined and the group has formed (Engine::health says who is missing). `comm` bounds how long
/// a worker may keep a call waiting (TcpCommOptions); `transport` is how a GPU
/// plan's device collectives travel (`glmc serve --tp-transport`).
Expected<std::unique_ptr<runtime::Engine>>
openLockstepEngine(std::unique_ptr<runtime::PlanFile> plan, const Checkpoint &checkpoint,
                   const std::string &listenAddress, runtime::TcpCommOptions comm = {},
                   runtime::DeviceTransport transport = runtime::DeviceTransport::Tcp,
                   const WeightLoadOptions &weights = {});

} // namespace glm::tools
