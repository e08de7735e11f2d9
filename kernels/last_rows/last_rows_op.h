// last_rows' plan adapter: each sequence's last real row of the step, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a last_rows step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> lastRowsGpu(const OpStep &step);
/// Runs a last_rows step with the CPU reference.
Status lastRowsCpu(const OpStep &step, const HostStep &host);

/// Checks a last_rows step against the contract above (kernels/common/OpContract.h).
Status lastRowsCheck(const OpStep &step);

} // namespace glm::kernels
