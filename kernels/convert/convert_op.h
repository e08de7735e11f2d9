// convert's plan adapter: the bf16 logits widened into the f32 io slot, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a convert step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> convertGpu(const OpStep &step);
/// Runs a convert step with the CPU reference.
Status convertCpu(const OpStep &step, const HostStep &host);

/// Checks a convert step against the contract above (kernels/common/OpContract.h).
Status convertCheck(const OpStep &step);

} // namespace glm::kernels
