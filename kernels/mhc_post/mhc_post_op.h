// mhc_post's plan adapter: mHC's residual update after a block, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a mhc_post step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> mhcPostGpu(const OpStep &step);
/// Runs a mhc_post step with the CPU reference.
Status mhcPostCpu(const OpStep &step, const HostStep &host);

/// Checks a mhc_post step against the contract above (kernels/common/OpContract.h).
Status mhcPostCheck(const OpStep &step);

} // namespace glm::kernels
