// layer_norm's plan adapter: LayerNorm over rows, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a layer_norm step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> layerNormGpu(const OpStep &step);
/// Runs a layer_norm step with the CPU reference.
Status layerNormCpu(const OpStep &step, const HostStep &host);

/// Checks a layer_norm step against the contract above (kernels/common/OpContract.h).
Status layerNormCheck(const OpStep &step);

} // namespace glm::kernels
