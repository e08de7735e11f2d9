// kda's plan adapter: the Kimi-Delta recurrence over each sequence, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a kda step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> kdaGpu(const OpStep &step);
/// Runs a kda step with the CPU reference.
Status kdaCpu(const OpStep &step, const HostStep &host);

/// Checks a kda step against the contract above (kernels/common/OpContract.h).
Status kdaCheck(const OpStep &step);

} // namespace glm::kernels
