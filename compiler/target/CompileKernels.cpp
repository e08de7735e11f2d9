//===- CompileKernels.cpp - the kernel table's cubins ---------------------===//
//
// Compiles every plan.kernel of a GPU plan with NVRTC for the plan's target (sm_90a, sm_121a),
// one program per instance on every core (instances are independent, and a cubin per kernel keeps
// each small and separately cached), and records its mangled `entry`, its `cubin` (a resource
// blob) and the `source_hash` the cache keys it by. The last pass before emission: `glmc dump-ir
// --stage plan` stops before it.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "kernels/common/Nvrtc.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANCOMPILEKERNELSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

struct CompileKernelsPass : glm::compiler::impl::PlanCompileKernelsPassBase<CompileKernelsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto targets = llvm::to_vector(module.getOps<planir::TargetOp>());
    if (targets.size() != 1) {
      module.emitError() << "plan-compile-kernels: expected one plan.target";
      return signalPassFailure();
    }
    const std::string arch = targets.front().getName().str();
    SmallVector<planir::KernelOp> kernels;
    for (auto k : module.getOps<planir::KernelOp>()) {
      if (!k.getCubin()) {
        kernels.push_back(k);
      }
    }
    if (kernels.empty()) {
      return;
    }
    // NVRTC runs off the main thread; the IR is written on it afterwards.
    struct Job {
      std::string instance, header;
      std::optional<glm::Expected<glm::kernels::CompiledModule>> result;
    };
    std::vector<Job> jobs;
    for (planir::KernelOp k : kernels) {
      jobs.push_back({k.getInstance().str(), k.getHeader().str(), std::nullopt});
    }
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < jobs.size(); i = next++) {
        jobs[i].result = glm::kernels::compileKernels(
            glm::strCat("#include \"", jobs[i].header, "\"\n"), {jobs[i].instance}, arch);
      }
    };
    std::vector<std::thread> threads;
    const unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                       static_cast<unsigned>(jobs.size())));
    for (unsigned i = 0; i < n; ++i) {
      threads.emplace_back(work);
    }
    for (std::thread &t : threads) {
      t.join();
    }
    OpBuilder b(module.getContext());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const glm::Expected<glm::kernels::CompiledModule> &m = *jobs[i].result;
      if (!m.ok()) {
        kernels[i].emitOpError() << jobs[i].instance << " does not compile for " << arch << ": "
                                 << m.status().message();
        return signalPassFailure();
      }
      auto type = RankedTensorType::get({static_cast<int64_t>(m->cubin.size())},
                                        b.getIntegerType(8, /*isSigned=*/false));
      kernels[i].setEntryAttr(b.getStringAttr(m->entries[0]));
      kernels[i].setCubinAttr(cast<ElementsAttr>(DenseUI8ResourceElementsAttr::get(
          type, "cubin", HeapAsmResourceBlob::allocateAndCopyInferAlign(ArrayRef(m->cubin)))));
      kernels[i].setSourceHashAttr(b.getStringAttr(m->hash));
    }
  }
};

} // namespace
