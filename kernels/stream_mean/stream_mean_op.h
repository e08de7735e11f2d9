// stream_mean's plan adapter: the mean over the mHC streams, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a stream_mean step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> streamMeanGpu(const OpStep &step);
/// Runs a stream_mean step with the CPU reference.
Status streamMeanCpu(const OpStep &step, const HostStep &host);

/// Checks a stream_mean step against the contract above (kernels/common/OpContract.h).
Status streamMeanCheck(const OpStep &step);

} // namespace glm::kernels
