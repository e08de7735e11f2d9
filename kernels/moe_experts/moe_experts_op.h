// moe_experts's plan adapter: the selected experts of each token (dense or EXL3), on either
// backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a moe_experts step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> moeExpertsGpu(const OpStep &step);
/// Runs a moe_experts step with the CPU reference.
Status moeExpertsCpu(const OpStep &step, const HostStep &host);

/// Checks a moe_experts step against the contract above (kernels/common/OpContract.h).
Status moeExpertsCheck(const OpStep &step);

} // namespace glm::kernels
