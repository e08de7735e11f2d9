// gated_rms_norm's plan adapter: KDA's gated RMSNorm, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernels a gated_rms_norm step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> gatedNormGpu(const OpStep &step);
/// Runs a gated_rms_norm step with the CPU reference.
Status gatedNormCpu(const OpStep &step, const HostStep &host);

/// The gated norm for a step that holds it beside other work, in groups of `group`: its x the
/// step's result `x` [rows, width], its gate operand `gate`, its weight `weight`, its output result
/// `out`: kda folded with the norm after it (plan-fuse-kda-norm) runs it for its prefill rows
/// (GPU) and for every row (CPU).
GpuLaunch gatedNormLaunchOf(const OpStep &step, size_t x, size_t gate, size_t weight, size_t out,
                            int64_t group, float eps);
Status gatedNormCpuOf(const OpStep &step, const HostStep &host, size_t x, size_t gate,
                      size_t weight, size_t out, int64_t group, float eps);

/// Checks a gated_rms_norm step against the contract above (kernels/common/OpContract.h).
Status gatedNormCheck(const OpStep &step);

} // namespace glm::kernels
