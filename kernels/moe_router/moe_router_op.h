// moe_router's plan adapter: the sigmoid router and its top-k experts, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a moe_router step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> moeRouterGpu(const OpStep &step);
/// Runs a moe_router step with the CPU reference.
Status moeRouterCpu(const OpStep &step, const HostStep &host);

/// Checks a moe_router step against the contract above (kernels/common/OpContract.h).
Status moeRouterCheck(const OpStep &step);

} // namespace glm::kernels
