// mhc_post's plan adapter: mHC's residual update after a block, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

class Contract;

/// The kernels a mhc_post step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> mhcPostGpu(const OpStep &step);
/// Runs a mhc_post step with the CPU reference.
Status mhcPostCpu(const OpStep &step, const HostStep &host);

/// mhc_post's launch and CPU run for a step that holds its operands as mhc_post does and its
/// result at `out`: mhc_pre folded with it (plan-fuse-mhc) runs them for its prefill rows.
GpuLaunch mhcPostLaunchOf(const OpStep &step, size_t out);
Status mhcPostCpuOf(const OpStep &step, const HostStep &host, size_t out);
/// The contract of those operands and that result; the streams' shape [rows, hc, hidden].
Shape mhcPostContract(Contract &c, size_t out);

/// Checks a mhc_post step against the contract above (kernels/common/OpContract.h).
Status mhcPostCheck(const OpStep &step);

} // namespace glm::kernels
