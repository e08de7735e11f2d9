// Each step of a plan file against its op's adapters.
#include "runtime/engine/PlanContracts.h"

#include "kernels/OpTable.h"
#include "kernels/common/KernelSources.h"
#include "runtime/engine/PlanStep.h"
#include "runtime/plan/Collectives.h"

#include <algorithm>
#include <cstring>

namespace glm::runtime {
namespace {

/// A GPU step's launches are those its adapter gives: the engine replays the plan's arguments
/// as written, so a launch the adapter would not make (another grid, a count or an offset
/// changed) would read or write memory the step does not own.
Status checkLaunches(const plan::Plan &p, const plan::Step &step, const kernels::OpAdapters &op,
                     const PlanStep &view) {
  const auto *launches = step.launches();
  const size_t count = launches ? launches->size() : 0;
  if (count == 0) {
    // A step without kernels says why; the engine refuses it by that reason before running.
    if (step.no_kernel() == nullptr || step.no_kernel()->size() == 0) {
      return invalidArgument("launches nothing and gives no reason");
    }
    return Status::success();
  }
  GLM_RETURN_IF_ERROR(kernels::checkWeightFormats(op, view, /*gpu=*/true));
  Expected<kernels::GpuStep> expected = op.gpu(view);
  if (!expected.ok()) {
    return invalidArgument("launches kernels its op has none for: ", expected.status().message());
  }
  if (expected->launches.size() != count) {
    return invalidArgument("has ", count, " launches, its op makes ", expected->launches.size());
  }
  for (uint32_t l = 0; l < count; ++l) {
    const plan::KernelLaunch &got = *launches->Get(l);
    const kernels::GpuLaunch &want = expected->launches[l];
    const std::string which = strCat("launch ", l, " (", want.instance, ")");
    const plan::Kernel *kernel = p.kernels()->Get(got.kernel()); // index checked by PlanFile
    if (kernel->name() == nullptr || kernel->name()->string_view() != want.instance) {
      return invalidArgument(which, " runs kernel ", kernel->name() ? kernel->name()->str() : "?");
    }
    for (int d = 0; d < 3; ++d) {
      if (got.grid()->Get(d) != want.dims.grid[d] || got.block()->Get(d) != want.dims.block[d]) {
        return invalidArgument(which, " has another grid or block than its op gives");
      }
    }
    if (got.shared_memory() != want.dims.sharedMemory) {
      return invalidArgument(which, " asks ", got.shared_memory(),
                             " bytes of shared memory, its op ", want.dims.sharedMemory);
    }
    if (got.args()->size() != want.bytes.size() ||
        std::memcmp(got.args()->data(), want.bytes.data(), want.bytes.size()) != 0) {
      return invalidArgument(which, " has other argument bytes than its op gives");
    }
    const size_t bindings = got.bindings() ? got.bindings()->size() : 0;
    if (bindings != want.bindings.size()) {
      return invalidArgument(which, " binds ", bindings, " addresses, its op ",
                             want.bindings.size());
    }
    // The compiler records fields in struct order, the adapter in the order it filled them.
    std::vector<const plan::ArgBinding *> written;
    for (size_t b = 0; b < bindings; ++b) {
      written.push_back(got.bindings()->Get(static_cast<uint32_t>(b)));
    }
    std::vector<kernels::ArgBinding> made = want.bindings;
    std::sort(written.begin(), written.end(),
              [](auto *x, auto *y) { return x->offset() < y->offset(); });
    std::sort(made.begin(), made.end(), [](auto &x, auto &y) { return x.offset < y.offset; });
    for (size_t b = 0; b < bindings; ++b) {
      const plan::ArgBinding &g = *written[b];
      const kernels::ArgBinding &w = made[b];
      if (g.offset() != w.offset || static_cast<int>(g.source()) != static_cast<int>(w.source) ||
          g.index() != w.index || g.add() != w.add) {
        return invalidArgument(which, " binds field ", w.name, " otherwise than its op");
      }
    }
  }
  // The workspace arena must hold what the step uses of it.
  for (const plan::Arena *arena : *p.arenas()) {
    if (arena->kind() == plan::ArenaKind::Workspace && arena->size() < expected->workspaceBytes) {
      return invalidArgument("needs ", expected->workspaceBytes,
                             " bytes of workspace, the plan has ", arena->size());
    }
  }
  return Status::success();
}

} // namespace

Status validatePlanSteps(const PlanFile &file) {
  const plan::Plan &p = file.root();
  const bool gpu = p.target()->arch() != plan::Arch::Cpu;
  // A GPU plan's launches are only this glmc's to check if it was compiled from the same kernel
  // sources: from others, its argument structs and cubins may differ anywhere, and the step that
  // differs first would not say why.
  if (gpu) {
    const std::string sources = kernels::kernelSourcesHash();
    if (p.kernel_sources_hash() == nullptr || p.kernel_sources_hash()->str() != sources) {
      return invalidArgument(file.source(),
                             ": compiled from other kernel sources than this glmc's (",
                             p.kernel_sources_hash() ? p.kernel_sources_hash()->str() : "none",
                             ", this glmc ", sources, "): recompile the plan with this glmc");
    }
  }
  for (const plan::Program *program : *p.programs()) {
    const size_t steps = program->steps() ? program->steps()->size() : 0;
    for (uint32_t i = 0; i < steps; ++i) {
      const plan::Step &step = *program->steps()->Get(i);
      const std::string where =
          strCat(file.source(), ": program ", program->name()->str(), ", step ", i, " (",
                 step.name() ? step.name()->str() : "?", ")");
      if (step.collective() != nullptr) {
        GLM_RETURN_IF_ERROR(collectiveShape(step, p.tp()).status().withContext(where));
        continue;
      }
      const kernels::OpAdapters *op = kernels::findOp(step.op()->string_view());
      if (op == nullptr) {
        return invalidArgument(where, ": op ", step.op()->str(), " is not one this glmc runs");
      }
      const PlanStep view(p, *program, step);
      // The adapters' own errors name the step by its IR name; the location goes in front.
      GLM_RETURN_IF_ERROR(op->check(view).withContext(where));
      if (gpu) {
        GLM_RETURN_IF_ERROR(checkLaunches(p, step, *op, view).withContext(where));
      }
    }
  }
  return Status::success();
}

} // namespace glm::runtime
