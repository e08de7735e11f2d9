//===- ChooseDenseFormats.cpp - how the arena holds each dense weight -----===//
//
// Decides, per glm.weight, whether the loader quantizes it to Q4 groups or fp8
// blocks (kernels/common/DenseFormats.h) or copies it as stored. The rule is
// Passes.td's description of the pass; it reads the graph (who reads a weight,
// whether those ops' kernels take the encodings, which linear is the head) and
// the rank's shapes, never a weight's name.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "ir/glm/GlmOps.h"
#include "kernels/OpTable.h"
#include "kernels/common/DenseFormats.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace glm::compiler {
#define GEN_PASS_DEF_GLMCHOOSEDENSEFORMATSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
using namespace glm::ir;

namespace {

std::optional<DenseEncoding> parseEncoding(StringRef text) {
  if (text == "bf16") {
    return DenseEncoding::Plain;
  }
  if (text == "q4") {
    return DenseEncoding::Q4;
  }
  if (text == "fp8") {
    return DenseEncoding::Fp8;
  }
  return std::nullopt;
}

/// The op table's bit of the glm dialect's encoding (the two enums share their values).
uint8_t bitOf(DenseEncoding e) {
  static_assert(
      static_cast<int>(DenseEncoding::Q4) == static_cast<int>(glm::kernels::DenseEncoding::Q4) &&
      static_cast<int>(DenseEncoding::Fp8) == static_cast<int>(glm::kernels::DenseEncoding::Fp8));
  return glm::kernels::encodingBit(static_cast<glm::kernels::DenseEncoding>(e));
}

/// Whether `linear`'s result, directly or through an all-gather, is sampled or returned.
bool isHead(LinearOp linear) {
  SmallVector<Value> values = {linear.getResult()};
  while (!values.empty()) {
    Value v = values.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<SampleOp, func::ReturnOp>(user)) {
        return true;
      }
      if (auto gather = dyn_cast<AllGatherOp>(user)) {
        values.push_back(gather.getResult());
      }
    }
  }
  return false;
}

/// Whether the rank's slice of `w` can hold `encoding` (DenseFormats.h's slice rules; the weight
/// is quantized at load, so fp8 blocks may not be split).
bool fits(WeightOp w, DenseEncoding encoding) {
  ArrayRef<int64_t> local = w.getTensorType().getShape();
  if (local.size() != 2) {
    return false;
  }
  if (encoding == DenseEncoding::Q4) {
    return glm::kernels::q4SliceKeepsGroups(local[1]);
  }
  SmallVector<int64_t> global(local);
  if (auto g = w->getAttrOfType<DenseI64ArrayAttr>("glm.global_shape")) {
    global.assign(g.asArrayRef().begin(), g.asArrayRef().end());
  }
  return glm::kernels::fp8SliceKeepsBlocks(local[0], global[0], /*asStored=*/false) &&
         glm::kernels::fp8SliceKeepsBlocks(local[1], global[1], /*asStored=*/false);
}

struct ChooseDenseFormats : glm::compiler::impl::GlmChooseDenseFormatsPassBase<ChooseDenseFormats> {
  using GlmChooseDenseFormatsPassBase::GlmChooseDenseFormatsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const std::optional<DenseEncoding> denseEncoding = parseEncoding(dense);
    const std::optional<DenseEncoding> headEncoding = parseEncoding(head);
    if (!denseEncoding || !headEncoding) {
      module.emitError() << "glm-choose-dense-formats: dense and head are bf16, q4 or fp8, got '"
                         << dense << "' and '" << head << "'";
      return signalPassFailure();
    }

    // The encodings every reader of a weight takes (the op table's gpuEncodings: an op without
    // them keeps its weights as stored), and which weights are the head's.
    llvm::DenseMap<StringRef, uint8_t> taken;
    llvm::DenseSet<StringRef> heads;
    module.walk([&](Operation *op) {
      const glm::kernels::OpAdapters *adapters = glm::kernels::findOp(op->getName().stripDialect());
      const uint8_t encodings = adapters != nullptr ? adapters->gpuEncodings : 0;
      auto linear = dyn_cast<LinearOp>(op);
      for (NamedAttribute attr : op->getAttrs()) {
        auto ref = dyn_cast<FlatSymbolRefAttr>(attr.getValue());
        if (!ref) {
          continue;
        }
        auto [it, inserted] = taken.try_emplace(ref.getValue(), encodings);
        if (!inserted) {
          it->second &= encodings;
        }
        if (linear && attr.getName() == linear.getWeightAttrName() && isHead(linear)) {
          heads.insert(ref.getValue());
        }
      }
    });

    for (WeightOp w : module.getOps<WeightOp>()) {
      const WeightFormat format = w.getFormat();
      const StringRef name = w.getSymName();
      if ((format != WeightFormat::BF16 && format != WeightFormat::F16 &&
           format != WeightFormat::F32) ||
          w.isPerExpert()) {
        continue;
      }
      // The format asked for, or fp8 where the readers take fp8 but not q4 (the router): never
      // fewer bits than asked.
      const uint8_t readers = taken.lookup(name);
      DenseEncoding encoding = heads.contains(name) ? *headEncoding : *denseEncoding;
      if (encoding == DenseEncoding::Q4 && (readers & bitOf(encoding)) == 0) {
        encoding = DenseEncoding::Fp8;
      }
      if (encoding != DenseEncoding::Plain && (readers & bitOf(encoding)) != 0 &&
          fits(w, encoding)) {
        w.setEncodingAttr(DenseEncodingAttr::get(&getContext(), encoding));
      }
    }
  }
};

} // namespace
