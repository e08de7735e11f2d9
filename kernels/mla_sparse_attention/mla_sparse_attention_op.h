// mla_sparse_attention's plan adapter: sparse MLA over the selected latent rows, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a mla_sparse_attention step launches on a GPU target, their grids and their
/// arguments.
Expected<GpuStep> mlaSparseAttentionGpu(const OpStep &step);
/// Runs a mla_sparse_attention step with the CPU reference.
Status mlaSparseAttentionCpu(const OpStep &step, const HostStep &host);

/// Checks a mla_sparse_attention step against the contract above (kernels/common/OpContract.h).
Status mlaSparseAttentionCheck(const OpStep &step);

} // namespace glm::kernels
