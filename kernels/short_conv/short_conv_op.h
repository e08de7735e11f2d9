// short_conv's plan adapter: KDA's causal short convolution over each sequence's window, on either
// backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a short_conv step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> shortConvGpu(const OpStep &step);
/// Runs a short_conv step with the CPU reference.
Status shortConvCpu(const OpStep &step, const HostStep &host);

/// Checks a short_conv step against the contract above (kernels/common/OpContract.h).
Status shortConvCheck(const OpStep &step);

} // namespace glm::kernels
