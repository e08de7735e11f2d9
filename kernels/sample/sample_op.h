// sample's plan adapter: the next token of each sequence from its logits row, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a sample step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> sampleGpu(const OpStep &step);
/// Runs a sample step with the CPU reference.
Status sampleCpu(const OpStep &step, const HostStep &host);

/// Checks a sample step against the contract above (kernels/common/OpContract.h).
Status sampleCheck(const OpStep &step);

} // namespace glm::kernels
