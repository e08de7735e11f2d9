// concat's plan adapter: operands joined along their second dimension, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a concat step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> concatGpu(const OpStep &step);
/// Runs a concat step with the CPU reference.
Status concatCpu(const OpStep &step, const HostStep &host);

/// Checks a concat step against the contract above (kernels/common/OpContract.h).
Status concatCheck(const OpStep &step);

} // namespace glm::kernels
