// embedding's plan adapter: a row of the table per token id, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a embedding step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> embeddingGpu(const OpStep &step);
/// Runs a embedding step with the CPU reference.
Status embeddingCpu(const OpStep &step, const HostStep &host);

/// Checks a embedding step against the contract above (kernels/common/OpContract.h).
Status embeddingCheck(const OpStep &step);

} // namespace glm::kernels
