// gated_rms_norm's plan adapter: KDA's gated RMSNorm, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a gated_rms_norm step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> gatedNormGpu(const OpStep &step);
/// Runs a gated_rms_norm step with the CPU reference.
Status gatedNormCpu(const OpStep &step, const HostStep &host);

/// Checks a gated_rms_norm step against the contract above (kernels/common/OpContract.h).
Status gatedNormCheck(const OpStep &step);

} // namespace glm::kernels
