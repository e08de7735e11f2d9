// rms_norm's plan adapter: RMSNorm over rows or groups of a row, on either backend.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// A normalising step's rows as the kernels see them: each group of `group` values of a row
/// (parameter `group`, by default the whole row) is a row of its own; parameter eps. Shared with
/// gated_norm, whose steps group the same way.
struct GroupedNormShape {
  int64_t groupsPerRow = 1, group = 0;
  float eps = 1e-5f;
};
GroupedNormShape groupedNormShapeOf(const OpStep &step);

/// The kernels a rms_norm step launches on a GPU target, their grids and their arguments.
Expected<GpuStep> rmsNormGpu(const OpStep &step);
/// Runs a rms_norm step with the CPU reference.
Status rmsNormCpu(const OpStep &step, const HostStep &host);

/// RMSNorm over whole rows for a step that holds it beside other work, its x the step's result `x`
/// [rows, dim], its weight `weight`, its output result `out`: mhc_pre folded with the norm after it
/// (plan-fuse-mhc-norm) runs it for its prefill rows (GPU) and for every row (CPU).
GpuLaunch rmsNormLaunchOf(const OpStep &step, size_t x, size_t weight, size_t out, float eps);
Status rmsNormCpuOf(const OpStep &step, const HostStep &host, size_t x, size_t weight, size_t out,
                    float eps);

/// Checks a rms_norm step against the contract above (kernels/common/OpContract.h).
Status rmsNormCheck(const OpStep &step);

} // namespace glm::kernels
