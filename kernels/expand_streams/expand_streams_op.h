// expand_streams's plan adapter: one hidden row copied into every mHC stream, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a expand_streams step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> expandStreamsGpu(const OpStep &step);
/// Runs a expand_streams step with the CPU reference.
Status expandStreamsCpu(const OpStep &step, const HostStep &host);

/// Checks a expand_streams step against the contract above (kernels/common/OpContract.h).
Status expandStreamsCheck(const OpStep &step);

} // namespace glm::kernels
