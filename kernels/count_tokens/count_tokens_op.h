// count_tokens' plan adapter: each sequence's token counts for the sampler's penalties, on either
// backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a count_tokens step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> countTokensGpu(const OpStep &step);
/// Runs a count_tokens step with the CPU reference.
Status countTokensCpu(const OpStep &step, const HostStep &host);

/// Checks a count_tokens step against the contract above (kernels/common/OpContract.h).
Status countTokensCheck(const OpStep &step);

} // namespace glm::kernels
