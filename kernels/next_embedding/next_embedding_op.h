// next_embedding's plan adapter: the MTP head's input embedding, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernel a next_embedding step launches on a GPU target, its grid and its arguments.
Expected<GpuStep> nextEmbeddingGpu(const OpStep &step);
/// Runs a next_embedding step with the CPU reference.
Status nextEmbeddingCpu(const OpStep &step, const HostStep &host);

/// Checks a next_embedding step against the contract above (kernels/common/OpContract.h).
Status nextEmbeddingCheck(const OpStep &step);

} // namespace glm::kernels
