// rms_norm's plan adapter: RMSNorm over rows or groups of a row, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a rms_norm step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> rmsNormGpu(const OpStep &step);
/// Runs a rms_norm step with the CPU reference.
Status rmsNormCpu(const OpStep &step, const HostStep &host);

} // namespace glm::kernels
