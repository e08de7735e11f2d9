// linear's plan adapter: y = x Wᵀ + b for dense and EXL3 weights, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a linear step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> linearGpu(const OpStep &step);
/// Runs a linear step with the CPU reference.
Status linearCpu(const OpStep &step, const HostStep &host);

/// Checks a linear step against the contract above (kernels/common/OpContract.h).
Status linearCheck(const OpStep &step);

} // namespace glm::kernels
