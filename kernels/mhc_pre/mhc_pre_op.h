// mhc_pre's plan adapter: mHC's stream mixing before a block, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a mhc_pre step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> mhcPreGpu(const OpStep &step);
/// Runs a mhc_pre step with the CPU reference.
Status mhcPreCpu(const OpStep &step, const HostStep &host);

/// Checks a mhc_pre step against the contract above (kernels/common/OpContract.h).
Status mhcPreCheck(const OpStep &step);

} // namespace glm::kernels
