// Which CUDA kernels each step of a GPU plan launches, with what grid, and their compilation into
// the plan's kernel table. `glmc compile` runs this on the plan it has just emitted; the rules live
// in each op's kernels/<op>/<op>_gpu.h, so the compiler and the kernels cannot disagree.
#pragma once

#include "base/Status.h"
#include "kernels/common/Launch.h"
#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::cuda {

/// One launch of a step: the kernel instance (NVRTC name expression and the header defining it)
/// and its dimensions.
struct SelectedLaunch {
  std::string header;
  std::string name;
  kernels::LaunchDims dims;
};

/// The launches of one step, in order; empty for collectives (they run through runtime/comm).
Expected<std::vector<SelectedLaunch>>
selectStepKernels(const plan::Plan &plan, const plan::Program &program, const plan::Step &step);

/// A plan's kernel table and every step's launches into it.
struct PlanKernels {
  struct Instance {
    std::string name, header, entry;
    std::vector<uint8_t> cubin;
    std::string hash;
  };
  struct Launch {
    uint32_t kernel;
    kernels::LaunchDims dims;
  };
  std::vector<Instance> kernels;
  /// launches[program][step]: in the plan's program and step order.
  std::vector<std::vector<std::vector<Launch>>> launches;
  /// Why each step that has no kernel yet launches nothing (one line per step).
  std::vector<std::string> missing;
  /// The scratch the steps share: the largest stepWorkspaceBytes (runtime/cuda/StepArgs.h).
  uint64_t workspaceBytes = 0;
};

/// Selects every step's kernels and compiles each distinct instance with NVRTC for `arch`
/// ("sm_90a", "sm_121a"), on all cores. A step whose op has no CUDA kernel yet gets no launches
/// and a line in `missing`; any other failure is an error.
Expected<PlanKernels> buildPlanKernels(const plan::Plan &plan, const std::string &arch);

} // namespace glm::cuda
