// add's plan adapter: the elementwise sum of two operands of one shape, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a add step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> addGpu(const OpStep &step);
/// Runs a add step with the CPU reference.
Status addCpu(const OpStep &step, const HostStep &host);

/// Checks a add step against the contract above (kernels/common/OpContract.h).
Status addCheck(const OpStep &step);

} // namespace glm::kernels
