//===- SelectKernels.cpp - each step's kernels, grids and arguments -------===//
//
// For a GPU plan (plan.target sm_90a or sm_121a), after plan-assign-arenas:
//
// 1. Each step that is not a collective asks its op's adapter (kernels/OpTable.h) for the
//    kernel instances it launches, their grids, shared memory and argument structs, and the
//    workspace they need, given the step's shapes and the target. The step records them as
//    `launches` (#plan.launch: the kernel, the geometry and every field of the argument struct,
//    constants and addresses by name) and `workspace`; a step whose op or shape has no CUDA
//    kernel yet records `no_kernel` with the reason, and the pass warns.
// 2. The distinct instances become the module's plan.kernel table, in first-use order.
// 3. The workspace arena is sized for the step that needs the most (steps run one after another
//    on one stream and share it).
//
// Before any of this, on every target, each step must hold its op's contract (the adapters'
// check, kernels/common/OpContract.h): the rule the runtime's validator applies to plan files,
// so a plan this compiler writes never meets a refusal there. The CPU target gets nothing else:
// the CPU engine runs each op's reference by its mnemonic.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/target/IrOpStep.h"

#include "kernels/OpTable.h"
#include "kernels/common/Launch.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANSELECTKERNELSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

struct SelectKernelsPass : glm::compiler::impl::PlanSelectKernelsPassBase<SelectKernelsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto targets = llvm::to_vector(module.getOps<planir::TargetOp>());
    if (targets.size() != 1) {
      module.emitError() << "plan-select-kernels: expected one plan.target (run glm-to-plan)";
      return signalPassFailure();
    }
    const glm::compiler::PlanFacts facts(module);
    WalkResult checked = module.walk([&](planir::StepOp step) {
      if (step.isCollective()) {
        return WalkResult::advance();
      }
      const glm::compiler::IrOpStep view(step, facts);
      if (failed(view.verifySymbols())) {
        return WalkResult::interrupt();
      }
      const glm::kernels::OpAdapters *adapters = glm::kernels::findOp(step.getOp().str());
      if (adapters == nullptr) {
        step.emitOpError() << "is op '" << step.getOp() << "', which kernels/OpTable.cpp lacks";
        return WalkResult::interrupt();
      }
      if (glm::Status contract = adapters->check(view); !contract.ok()) {
        step.emitOpError() << contract.message();
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (checked.wasInterrupted()) {
      return signalPassFailure();
    }
    if (targets.front().getName() == "cpu") {
      return;
    }
    OpBuilder b(module.getContext());
    llvm::StringMap<FlatSymbolRefAttr> kernels; // symbol -> its reference (a table already there
                                                // is kept, so the pass can run again)
    for (auto k : module.getOps<planir::KernelOp>()) {
      kernels[k.getSymName()] = FlatSymbolRefAttr::get(k.getSymNameAttr());
    }
    Operation *firstProgram = nullptr;
    for (Operation &op : *module.getBody()) {
      if (isa<planir::ProgramOp>(op)) {
        firstProgram = &op;
        break;
      }
    }
    int64_t workspace = 0;
    int64_t missing = 0;
    planir::StepOp firstMissing;
    std::string firstReason;
    WalkResult walked = module.walk([&](planir::StepOp step) {
      if (step.isCollective()) {
        return WalkResult::advance();
      }
      const glm::compiler::IrOpStep view(step, facts);
      const glm::kernels::OpAdapters *adapters = glm::kernels::findOp(step.getOp().str());
      const glm::Status formats = glm::kernels::checkWeightFormats(*adapters, view, /*gpu=*/true);
      glm::Expected<glm::kernels::GpuStep> gpu =
          formats.ok() ? adapters->gpu(view) : glm::Expected<glm::kernels::GpuStep>(formats);
      if (!gpu.ok() && gpu.status().code() == glm::StatusCode::Unimplemented) {
        // The plan is still written (its partition, memory and IR are valid) with this step
        // launching nothing; inspect shows it and the engine refuses the plan by name.
        step.setNoKernelAttr(b.getStringAttr(gpu.status().message()));
        if (missing++ == 0) {
          firstMissing = step;
          firstReason = gpu.status().message();
        }
        return WalkResult::advance();
      }
      if (!gpu.ok()) {
        step.emitOpError() << gpu.status().message();
        return WalkResult::interrupt();
      }
      SmallVector<Attribute> launches;
      for (const glm::kernels::GpuLaunch &l : gpu->launches) {
        FailureOr<Attribute> launch = launchAttr(step, l, kernels, b, module, firstProgram);
        if (failed(launch)) {
          return WalkResult::interrupt();
        }
        launches.push_back(*launch);
      }
      step.setLaunchesAttr(b.getArrayAttr(launches));
      step.setWorkspaceAttr(b.getI64IntegerAttr(static_cast<int64_t>(gpu->workspaceBytes)));
      workspace = std::max(workspace, static_cast<int64_t>(gpu->workspaceBytes));
      return WalkResult::advance();
    });
    if (walked.wasInterrupted()) {
      return signalPassFailure();
    }
    if (missing > 0) {
      firstMissing.emitWarning()
          << missing
          << " steps have no CUDA kernel yet and launch nothing (the plan cannot run on a GPU "
             "until they do); the first: "
          << firstReason;
    }
    // The workspace arena, after the others (its size rounded as theirs are).
    for (auto arena : llvm::make_early_inc_range(module.getOps<planir::ArenaOp>())) {
      if (arena.getKind() == "workspace") {
        arena.erase();
      }
    }
    Operation *lastArena = nullptr;
    for (auto arena : module.getOps<planir::ArenaOp>()) {
      lastArena = arena;
    }
    if (lastArena != nullptr) {
      b.setInsertionPointAfter(lastArena);
    } else {
      b.setInsertionPointToStart(module.getBody());
    }
    planir::ArenaOp::create(
        b, module.getLoc(), b.getStringAttr("workspace"), b.getStringAttr("workspace"),
        b.getI64IntegerAttr((workspace + 255) / 256 * 256), b.getI64IntegerAttr(256));
  }

  /// The launch attribute of `l`, adding its kernel to the table when it is new.
  FailureOr<Attribute> launchAttr(planir::StepOp step, const glm::kernels::GpuLaunch &l,
                                  llvm::StringMap<FlatSymbolRefAttr> &kernels, OpBuilder &b,
                                  ModuleOp module, Operation *firstProgram) {
    // The argument struct must be exactly its recorded constants (every field written through
    // ArgPack), or the plan would launch with bytes the IR does not show.
    if (glm::kernels::assembleArgs(l.argsSize, l.constants) != l.bytes) {
      return step.emitOpError() << "the arguments of " << l.instance
                                << " hold bytes that no recorded field explains (a field written "
                                   "past ArgPack in the op's adapter)";
    }
    const std::string symbol = glm::kernels::shortKernelName(l.instance);
    auto [it, inserted] = kernels.try_emplace(symbol);
    if (inserted) {
      OpBuilder::InsertionGuard guard(b);
      if (firstProgram != nullptr) {
        b.setInsertionPoint(firstProgram);
      } else {
        b.setInsertionPointToEnd(module.getBody());
      }
      planir::KernelOp::create(b, module.getLoc(), b.getStringAttr(symbol),
                               b.getStringAttr(l.instance), b.getStringAttr(l.header), nullptr,
                               nullptr, nullptr);
      it->second = FlatSymbolRefAttr::get(b.getContext(), symbol);
    }
    SmallVector<std::pair<int64_t, Attribute>> fields;
    for (const glm::kernels::ArgConstant &c : l.constants) {
      Attribute value =
          c.isFloat ? Attribute(b.getFloatAttr(c.width == 4 ? Type(b.getF32Type()) : b.getF64Type(),
                                               c.floatValue))
                    : Attribute(b.getIntegerAttr(
                          b.getIntegerType(8 * c.width),
                          APInt(8 * c.width, static_cast<uint64_t>(c.intValue), true)));
      fields.push_back(
          {c.offset, planir::ArgFieldAttr::get(b.getContext(), c.name, c.offset, value)});
    }
    for (const glm::kernels::ArgBinding &a : l.bindings) {
      fields.push_back({a.offset, planir::ArgBindAttr::get(b.getContext(), a.name, a.offset,
                                                           glm::kernels::argSourceName(a.source),
                                                           a.index, static_cast<int64_t>(a.add))});
    }
    std::stable_sort(fields.begin(), fields.end(),
                     [](const auto &x, const auto &y) { return x.first < y.first; });
    SmallVector<Attribute> ordered;
    for (auto &[offset, attr] : fields) {
      ordered.push_back(attr);
    }
    auto dims = [](const unsigned (&d)[3]) { return SmallVector<int64_t>{d[0], d[1], d[2]}; };
    return Attribute(planir::LaunchAttr::get(b.getContext(), it->second, dims(l.dims.grid),
                                             dims(l.dims.block), l.dims.sharedMemory, l.argsSize,
                                             b.getArrayAttr(ordered)));
  }
};

} // namespace
