// dsa_indexer's plan adapter: the DSA indexer's pooled keys and top-k selection, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a dsa_indexer step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> dsaIndexerGpu(const OpStep &step);
/// Runs a dsa_indexer step with the CPU reference.
Status dsaIndexerCpu(const OpStep &step, const HostStep &host);

/// Checks a dsa_indexer step against the contract above (kernels/common/OpContract.h).
Status dsaIndexerCheck(const OpStep &step);

} // namespace glm::kernels
