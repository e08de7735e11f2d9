// swiglu's plan adapter: the clamped SwiGLU of gate and up, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a swiglu step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> swigluGpu(const OpStep &step);
/// Runs a swiglu step with the CPU reference.
Status swigluCpu(const OpStep &step, const HostStep &host);

/// Checks a swiglu step against the contract above (kernels/common/OpContract.h).
Status swigluCheck(const OpStep &step);

} // namespace glm::kernels
