//===- GlmToPlan.cpp - lower glm programs to plan steps -------------------===//
//
// 1. Declarations: each glm.weight becomes a plan.weight sized in its storage
//    format on this rank; each glm.state a plan.state (the indexer's also gets
//    a per-sequence slot for the open pool's raw keys and gates).
// 2. Programs: each func.func becomes a plan.program. Its token-id argument and
//    returned logits / sampled ids are io buffers; every other value gets a
//    plan.alloc named after its NameLoc.
// 3. Steps: each glm op becomes a plan.step with its weights and states in the
//    op's contract order (SymbolContract), the step context it reads after its
//    operands (ReadsStepContext), its remaining attributes as parameters, and the
//    bytes and FLOPs it moves, which `glmc inspect` and the roofline report.
//    (Kernels are chosen later, per target: plan-select-kernels.)
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/target/Target.h"

#include "ir/glm/GlmOps.h"
#include "kernels/common/DenseFormats.h"
#include "kernels/sample/sample_params.h"
#include "runtime/weights/Exl3Tensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <limits>
#include <optional>

namespace glm::compiler {
#define GEN_PASS_DEF_GLMTOPLANPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
using namespace glm::ir;
namespace planir = glm::planir;

namespace {

/// Sizes, bytes and FLOPs as the plan stores them (i64): a product or sum, or nullopt when it
/// leaves int64. A module's shapes are not to be trusted (glm-opt reads any file, and a dynamic
/// dimension is negative), and a count that wraps would size an arena wrongly.
constexpr uint64_t kMaxCount = std::numeric_limits<int64_t>::max();
std::optional<uint64_t> mul(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a || !b) {
    return std::nullopt;
  }
  std::optional<uint64_t> r = llvm::checkedMulUnsigned(*a, *b);
  return r && *r <= kMaxCount ? r : std::nullopt;
}
std::optional<uint64_t> add(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a || !b) {
    return std::nullopt;
  }
  std::optional<uint64_t> r = llvm::checkedAddUnsigned(*a, *b);
  return r && *r <= kMaxCount ? r : std::nullopt;
}

/// A shape's element count; nullopt for a negative (dynamic) dimension or past int64.
std::optional<uint64_t> numel(ArrayRef<int64_t> shape) {
  std::optional<uint64_t> n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return std::nullopt;
    }
    n = mul(n, static_cast<uint64_t>(d));
  }
  return n;
}

/// A buffer's bytes, as planir::BufferType::getByteSize() computes them, but checked.
std::optional<uint64_t> bufferBytes(Value v) {
  auto type = cast<planir::BufferType>(v.getType());
  const unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return mul(numel(type.getShape()), (bits + 7) / 8);
}

/// The largest weight the layouts below size: far beyond any model (2^48 elements, 562 TB of
/// bf16), and small enough that every padded layout of it (q4, fp8, EXL3) fits in int64.
constexpr uint64_t kMaxWeightElements = uint64_t(1) << 48;
constexpr int64_t kMaxWeightDim = int64_t(1) << 31;

/// The weights and states an op names, in the order its kernel contract takes them (the op's
/// SymbolContract, declared with it in GlmOps.td; an absent optional one is skipped).
struct Operands {
  SmallVector<FlatSymbolRefAttr> weights;
  SmallVector<FlatSymbolRefAttr> states;
  /// Attribute names that are symbols, so not parameters.
  SmallVector<StringRef> symbolAttrs;
};

class Lowering {
public:
  Lowering(ModuleOp module, const glm::compiler::TargetDesc &target, bool f32, bool fp8Kv,
           int64_t exl3Bits, int64_t maxSeqs, int64_t maxContext, int64_t pageTokens)
      : module_(module), b_(module.getContext()), target_(target), f32_(f32), fp8Kv_(fp8Kv),
        exl3Bits_(exl3Bits), maxSeqs_(maxSeqs), maxContext_(maxContext), pageTokens_(pageTokens) {}

  LogicalResult run() {
    // Which symbols are states (the rest of the symbols ops name are weights).
    for (auto st : module_.getOps<StateOp>()) {
      states_.insert(st.getSymName());
    }
    int64_t tp = 1;
    if (auto attr = module_->getAttrOfType<IntegerAttr>("glm.tp")) {
      tp = attr.getInt();
    }
    b_.setInsertionPointToStart(module_.getBody());
    planir::TargetOp::create(
        b_, module_.getLoc(), b_.getStringAttr(target_.name), b_.getI64IntegerAttr(target_.smCount),
        b_.getI64IntegerAttr(target_.sharedMemoryPerBlock),
        b_.getI64IntegerAttr(target_.memoryBytes), b_.getF64FloatAttr(target_.bandwidthBytesPerS),
        b_.getI64IntegerAttr(tp), b_.getStringAttr(f32_ ? "f32" : "bf16"));
    planir::StatePoolOp::create(b_, module_.getLoc(), b_.getI64IntegerAttr(maxSeqs_),
                                b_.getI64IntegerAttr(maxContext_),
                                b_.getI64IntegerAttr(pageTokens_), nullptr, nullptr, nullptr);

    // Each indexer state's tail: the open pool's raw keys and gates, up to kpool - 1 tokens.
    module_.walk([&](DsaIndexerOp op) {
      tails_[op.getStateAttr().getValue()] = {static_cast<int64_t>(op.getKpool()) - 1,
                                              2 * static_cast<int64_t>(op.getHeadDim())};
    });
    SmallVector<Operation *> erase;
    for (Operation &op : llvm::make_early_inc_range(*module_.getBody())) {
      if (auto w = dyn_cast<WeightOp>(op)) {
        if (failed(lowerWeight(w))) {
          return failure();
        }
        erase.push_back(w);
      } else if (auto s = dyn_cast<StateOp>(op)) {
        lowerState(s);
        erase.push_back(s);
      } else if (auto fn = dyn_cast<func::FuncOp>(op)) {
        if (failed(lowerProgram(fn))) {
          return failure();
        }
        erase.push_back(fn);
      }
    }
    for (Operation *op : erase) {
      op->erase();
    }
    return success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Declarations
  //===--------------------------------------------------------------------===//

  /// Bytes of one rank's slice in its storage format; nullopt for a shape too large to lay out.
  std::optional<uint64_t> storedBytes(WeightOp w, ArrayRef<int64_t> shape) {
    const std::optional<uint64_t> count = numel(shape);
    if (!count || *count > kMaxWeightElements ||
        llvm::any_of(shape, [](int64_t d) { return d > kMaxWeightDim; })) {
      return std::nullopt;
    }
    const uint64_t n = *count;
    if (n == 0) {
      return 0;
    }
    if (w.arenaEncoding() != DenseEncoding::Plain) {
      // kernels/common/DenseFormats.h: M matrices [R, C], the experts (if stacked) first.
      const int64_t rows = shape[shape.size() - 2], cols = shape.back();
      const int64_t matrices = static_cast<int64_t>(n / static_cast<uint64_t>(rows * cols));
      return static_cast<uint64_t>(w.arenaEncoding() == DenseEncoding::Q4
                                       ? glm::kernels::q4Bytes(matrices, rows, cols)
                                       : glm::kernels::fp8Bytes(matrices, rows, cols));
    }
    switch (w.getFormat()) {
    case WeightFormat::F32:
      return 4 * n;
    case WeightFormat::BF16:
    case WeightFormat::F16:
      return 2 * n;
    case WeightFormat::FP8: // arenaEncoding() is Fp8, sized above
    case WeightFormat::EXL3: {
      // The runtime's EXL3 slice layout: per matrix a trellis of K bits per weight over both
      // dimensions padded to 128, suh and svh (an f16 per padded channel) and 8 bytes of K and
      // codebook. K is the checkpoint's largest, so every matrix fits.
      const int64_t rows = shape[shape.size() - 2], cols = shape.back();
      const int64_t matrices = static_cast<int64_t>(n / static_cast<uint64_t>(rows * cols));
      return glm::Exl3ArenaLayout::bytesFor(matrices, rows, cols, static_cast<int>(exl3Bits_));
    }
    }
    return 2 * n;
  }

  LogicalResult lowerWeight(WeightOp w) {
    RankedTensorType local = w.getTensorType();
    SmallVector<int64_t> global(local.getShape());
    if (auto g = w->getAttrOfType<DenseI64ArrayAttr>("glm.global_shape")) {
      global.assign(g.asArrayRef().begin(), g.asArrayRef().end());
    }
    // An EXL3 matrix can only be split between ranks on its 128-feature Hadamard blocks.
    if (w.getFormat() == WeightFormat::EXL3) {
      const size_t rank = global.size();
      for (size_t d = rank >= 2 ? rank - 2 : 0; d < rank; ++d) {
        if (local.getShape()[d] != global[d] && local.getShape()[d] % 128 != 0) {
          return w.emitError() << "EXL3 weight " << w.getSymName() << ": a rank holds "
                               << local.getShape()[d] << " of " << global[d]
                               << " features, which cuts its 128-feature Hadamard blocks";
        }
      }
    }
    // Q4 and fp8 must hold whole groups and blocks per rank (glm-choose-dense-formats only
    // chooses shapes that do; an fp8 checkpoint's weight is checked here, and may also split a
    // block into whole parts: each rank's part then lies in one block and keeps its scale).
    const DenseEncoding encoding = w.arenaEncoding();
    if (encoding != DenseEncoding::Plain) {
      ArrayRef<int64_t> shape = local.getShape();
      if (shape.size() < 2) {
        return w.emitError() << "weight " << w.getSymName() << ": "
                             << stringifyDenseEncoding(encoding) << " needs a matrix";
      }
      const bool q4 = encoding == DenseEncoding::Q4;
      const bool asStored = w.getFormat() == WeightFormat::FP8;
      for (size_t d = shape.size() - 2; d < shape.size(); ++d) {
        const bool keeps = q4 ? d + 1 < shape.size() || glm::kernels::q4SliceKeepsGroups(shape[d])
                              : glm::kernels::fp8SliceKeepsBlocks(shape[d], global[d], asStored);
        if (!keeps) {
          return w.emitError() << "weight " << w.getSymName() << ": a rank holds " << shape[d]
                               << " of " << global[d] << " features, which cuts its "
                               << (q4 ? "64-feature q4 groups" : "128 x 128 fp8 blocks");
        }
      }
    }
    Type element = local.getElementType();
    if (encoding == DenseEncoding::Q4) {
      element = IntegerType::get(b_.getContext(), 8, IntegerType::Unsigned);
    } else if (encoding == DenseEncoding::Fp8) {
      element = Float8E4M3FNType::get(b_.getContext());
    }
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(w);
    const std::optional<uint64_t> bytes = storedBytes(w, local.getShape());
    if (!bytes) {
      std::string dims;
      llvm::raw_string_ostream os(dims);
      llvm::interleaveComma(local.getShape(), os);
      return w.emitError() << "weight " << w.getSymName() << ": a rank's slice of shape [" << dims
                           << "] is too large to lay out (at most 2^48 elements and 2^31 per "
                              "dimension)";
    }
    planir::WeightOp::create(
        b_, w.getLoc(), w.getSymNameAttr(), w.getCheckpointAttr(),
        b_.getI64IntegerAttr(w.isPerExpert() ? global[0] : 0),
        b_.getStringAttr(stringifyWeightFormat(w.getFormat())),
        b_.getStringAttr(stringifyDenseEncoding(encoding)), b_.getDenseI64ArrayAttr(global),
        b_.getStringAttr(stringifyShardKind(w.getShard().getKind())),
        b_.getI64IntegerAttr(w.getShard().getDim()), b_.getDenseI64ArrayAttr(local.getShape()),
        TypeAttr::get(element), b_.getI64IntegerAttr(static_cast<int64_t>(*bytes)), nullptr);
    return success();
  }

  void lowerState(StateOp s) {
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(s);
    Type element = b_.getF32Type();
    bool paged = false;
    switch (s.getKind()) {
    case StateKind::KdaRecurrent:
      break; // the recurrence accumulates in f32 in every precision, as HF does
    case StateKind::ConvWindow:
      element = f32_ ? b_.getF32Type() : Type(b_.getBF16Type());
      break;
    case StateKind::MlaLatent:
      paged = true;
      element = f32_ ? b_.getF32Type()
                     : (fp8Kv_ ? Type(Float8E4M3FNType::get(b_.getContext())) : b_.getBF16Type());
      break;
    case StateKind::IndexKeys:
      paged = true;
      element = f32_ ? b_.getF32Type() : Type(b_.getBF16Type());
      break;
    case StateKind::TokenCounts:
      element = b_.getI32Type(); // counts (kernels/count_tokens), exact in every precision
      break;
    }
    auto make = [&](StringRef name, ArrayRef<int64_t> shape, bool isPaged) {
      planir::StateOp::create(b_, s.getLoc(), b_.getStringAttr(name),
                              b_.getStringAttr(stringifyStateKind(s.getKind())),
                              b_.getDenseI64ArrayAttr(shape), TypeAttr::get(element),
                              b_.getBoolAttr(isPaged), nullptr, nullptr, nullptr);
    };
    make(s.getSymName(), s.getType().getShape(), paged);
    if (auto tail = tails_.find(s.getSymName()); tail != tails_.end()) {
      make(tailOf(s.getSymName()), tail->second, false); // per sequence, until the pool closes
    }
  }

  /// The plan state holding `state`'s tail.
  static std::string tailOf(StringRef state) { return (state + ".tail").str(); }

  //===--------------------------------------------------------------------===//
  // Programs
  //===--------------------------------------------------------------------===//

  Type activationType(Type element) {
    if (isa<FloatType>(element)) {
      return f32_ ? b_.getF32Type() : Type(b_.getBF16Type());
    }
    return element;
  }

  planir::BufferType bufferType(Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    return planir::BufferType::get(b_.getContext(), t.getShape(),
                                   activationType(t.getElementType()));
  }

  static std::string nameOf(Value v, StringRef fallback) {
    if (auto loc = dyn_cast<NameLoc>(v.getLoc())) {
      return loc.getName().str();
    }
    return fallback.str();
  }

  Value ioAlloc(Location loc, StringRef kind, ArrayRef<int64_t> shape, Type element) {
    return planir::AllocOp::create(b_, NameLoc::get(b_.getStringAttr(kind), loc),
                                   planir::BufferType::get(b_.getContext(), shape, element),
                                   b_.getStringAttr(kind), b_.getStringAttr(kind), nullptr);
  }

  /// Results kept in f32 in a bf16 forward: mHC's mixing weights (post, comb), which HF computes
  /// in f32 and which only ever feed mhc_post, and the sampler's logprobs, which the host reads.
  static bool keepsF32(Operation *op, size_t result) {
    return (isa<MhcPreOp>(op) && (result == 1 || result == 2)) ||
           (isa<SampleOp>(op) && result == 1);
  }

  Value alloc(Location loc, Value v, StringRef name, StringAttr io = {}, bool f32 = false) {
    planir::BufferType type = bufferType(v);
    if ((io && io.getValue() == "logits") || (f32 && isa<FloatType>(type.getElementType()))) {
      // Logits reach the host and the sampler in f32 whatever the activation precision.
      type = planir::BufferType::get(b_.getContext(), type.getShape(), b_.getF32Type());
    }
    return planir::AllocOp::create(b_, loc, type, b_.getStringAttr(name), io, nullptr);
  }

  LogicalResult lowerProgram(func::FuncOp fn) {
    auto info = fn->getAttrOfType<DictionaryAttr>("glm.program");
    if (!info) {
      return fn.emitOpError() << "is not a glm program (no glm.program attribute)";
    }
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(fn);
    auto logits = dyn_cast_or_null<StringAttr>(info.get("logits"));
    auto program = planir::ProgramOp::create(
        b_, fn.getLoc(), fn.getSymNameAttr(), cast<StringAttr>(info.get("kind")),
        cast<IntegerAttr>(info.get("batch")), cast<IntegerAttr>(info.get("rows")),
        logits && logits.getValue() == "last_row" ? b_.getUnitAttr() : nullptr, nullptr);
    Block *body = new Block();
    program.getBody().push_back(body);
    b_.setInsertionPointToStart(body);

    // Which values the program returns, and as which io slot.
    auto ret = cast<func::ReturnOp>(fn.getBody().back().getTerminator());
    // A program returns, in this order, its logits, the sampler's ids and logprobs and, with an
    // MTP head, that head's sampler's ids (models/glm53/Builder.h).
    static constexpr StringLiteral kReturned[] = {"logits", "sampled_ids", "sampled_logprobs",
                                                  "draft_ids"};
    if (ret.getNumOperands() < 3 || ret.getNumOperands() > std::size(kReturned)) {
      return fn.emitOpError() << "returns " << ret.getNumOperands()
                              << " values; a program returns its logits, the sampler's ids and "
                                 "logprobs, and an MTP head's ids";
    }
    llvm::DenseMap<Value, StringRef> outputs;
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      auto sample = v.getDefiningOp<SampleOp>();
      const bool ids = i % 2 == 1, logprobs = i == 2;
      if ((ids || logprobs) != static_cast<bool>(sample) ||
          (sample && v != (ids ? sample.getIds() : sample.getLogprobs()))) {
        return fn.emitOpError() << "returns value " << i << " as " << kReturned[i]
                                << ", which is not what it computes";
      }
      outputs[v] = kReturned[i];
    }
    // The sampler's vocabulary, for the token mask.
    const int64_t vocab = cast<RankedTensorType>(ret.getOperand(0).getType()).getDimSize(1);

    llvm::DenseMap<Value, Value> buffers;
    for (BlockArgument arg : fn.getArguments()) {
      buffers[arg] = alloc(arg.getLoc(), arg, nameOf(arg, "tokens"), b_.getStringAttr("token_ids"));
    }
    // The rest of the step context the host writes before each replay (DESIGN.md §2): each row's
    // absolute position, each sequence's state slot and page table, and its sampling parameters.
    const int64_t rows = cast<RankedTensorType>(fn.getArgument(0).getType()).getDimSize(0);
    const int64_t batch = cast<IntegerAttr>(info.get("batch")).getInt();
    const int64_t pagesPerSequence = (maxContext_ + pageTokens_ - 1) / pageTokens_;
    Type i32 = b_.getI32Type();
    context_.clear();
    picked_ = {};
    static_assert(glm::kernels::kSampleParamWords == 16 &&
                      glm::kernels::kSampleTopLogprobs == kSampleAlternatives,
                  "the sampler's io slots as the kernels read them");
    for (auto [slot, shape] :
         {std::pair<StringRef, SmallVector<int64_t, 2>>{"positions", {rows}},
          {"sequence_slots", {batch}},
          {"page_table", {batch, pagesPerSequence}},
          {"sampling_params", {batch, glm::kernels::kSampleParamWords}},
          {"logit_bias", {batch, 2 * glm::kernels::kSampleBiasEntries}},
          {"token_mask", {batch, std::max<int64_t>(glm::kernels::maskWords(vocab), 1)}}}) {
      context_[slot] = ioAlloc(fn.getLoc(), slot, shape, i32);
    }
    for (Operation &op : fn.getBody().front().without_terminator()) {
      SmallVector<Value> inputs, results;
      SmallVector<std::pair<Value, Value>> widen; // bf16 results and the f32 buffers they fill
      for (Value v : op.getOperands()) {
        inputs.push_back(buffers.lookup(v));
      }
      // An op without results (count_tokens) is named by its own location.
      const std::string name =
          op.getNumResults() > 0
              ? nameOf(op.getResult(0), op.getName().stripDialect())
              : (isa<NameLoc>(op.getLoc()) ? cast<NameLoc>(op.getLoc()).getName().str()
                                           : op.getName().stripDialect().str());
      for (auto [i, r] : llvm::enumerate(op.getResults())) {
        const std::string rname = op.getNumResults() == 1 ? name : name + "." + std::to_string(i);
        auto io = outputs.find(r);
        const bool logitsIo = io != outputs.end() && io->second == "logits";
        if (!f32_ && (logitsIo || llvm::any_of(r.getUsers(), llvm::IsaPred<SampleOp>))) {
          // HF's lm_head runs in bf16 and widens its logits afterwards (.float()): the step
          // writes bf16 and a convert step fills the f32 logits the sampler (and, from the
          // logits slot, the host) reads. The MTP head's are widened alike.
          Value narrow = alloc(op.getLoc(), r, rname + ".bf16");
          results.push_back(narrow);
          widen.push_back({narrow, alloc(op.getLoc(), r, rname,
                                         logitsIo ? b_.getStringAttr("logits") : StringAttr(),
                                         /*f32=*/true)});
          buffers[r] = widen.back().second;
          continue;
        }
        Value buffer = alloc(op.getLoc(), r, rname,
                             io == outputs.end() ? StringAttr() : b_.getStringAttr(io->second),
                             keepsF32(&op, i));
        buffers[r] = buffer;
        results.push_back(buffer);
      }
      Value pickedPositions;
      auto reader = dyn_cast<ReadsStepContext>(&op);
      if (reader && reader.picksRows()) {
        // The rows it picks take their positions along: the steps after it (the head) run on
        // those rows, and these are their positions.
        const int64_t picked = cast<RankedTensorType>(op.getResult(0).getType()).getDimSize(0);
        pickedPositions = planir::AllocOp::create(
            b_, NameLoc::get(b_.getStringAttr(name + ".positions"), op.getLoc()),
            planir::BufferType::get(b_.getContext(), {picked}, i32),
            b_.getStringAttr(name + ".positions"), nullptr, nullptr);
        results.push_back(pickedPositions);
      }
      if (failed(lowerStep(&op, name, inputs, results))) {
        return failure();
      }
      if (pickedPositions) {
        picked_ = {pickedPositions,
                   cast<RankedTensorType>(op.getResult(0).getType()).getDimSize(0)};
      }
      for (auto [narrow, wide] : widen) {
        planir::StepOp::create(
            b_, op.getLoc(), b_.getStringAttr("convert"), b_.getStringAttr(name + ".f32"),
            ValueRange{narrow}, ValueRange{wide}, b_.getArrayAttr({}), b_.getArrayAttr({}),
            b_.getDictionaryAttr({}),
            b_.getI64IntegerAttr(
                static_cast<int64_t>(cast<planir::BufferType>(narrow.getType()).getByteSize())),
            b_.getI64IntegerAttr(
                static_cast<int64_t>(cast<planir::BufferType>(wide.getType()).getByteSize())),
            b_.getI64IntegerAttr(0), nullptr, nullptr, nullptr);
      }
    }
    return success();
  }

  Operands contractOperands(Operation *op) const {
    Operands r;
    auto contract = dyn_cast<SymbolContract>(op);
    if (!contract) {
      return r;
    }
    for (StringRef name : contract.getContractSymbols()) {
      r.symbolAttrs.push_back(name);
      if (auto ref = op->getAttrOfType<FlatSymbolRefAttr>(name)) {
        (states_.contains(ref.getValue()) ? r.states : r.weights).push_back(ref);
      }
    }
    // A state with a tail (lowerState) brings it along, after the op's own states.
    for (size_t i = 0, n = r.states.size(); i < n; ++i) {
      if (tails_.contains(r.states[i].getValue())) {
        r.states.push_back(FlatSymbolRefAttr::get(b_.getContext(), tailOf(r.states[i].getValue())));
      }
    }
    return r;
  }

  LogicalResult lowerStep(Operation *op, const std::string &name, ArrayRef<Value> opInputs,
                          ArrayRef<Value> results) {
    Operands operands = contractOperands(op);
    // The step context the op reads (its ReadsStepContext) follows the op's own inputs: a
    // stateful step at least which sequence each row belongs to and where.
    SmallVector<Value> inputs(opInputs);
    ArrayRef<StringRef> slots;
    if (auto reader = dyn_cast<ReadsStepContext>(op)) {
      slots = reader.getStepContext();
    }
    if (!operands.states.empty() &&
        (!llvm::is_contained(slots, "positions") || !llvm::is_contained(slots, "sequence_slots"))) {
      return op->emitOpError("names a state but does not read the positions and sequence slots "
                             "(ReadsStepContext)");
    }
    for (StringRef slot : slots) {
      Value buffer = slot == "positions" ? positionsFor(op) : context_.lookup(slot);
      if (!buffer) {
        return op->emitOpError() << "reads step context '" << slot
                                 << "': none of positions, sequence_slots, page_table, "
                                    "sampling_params, logit_bias, token_mask";
      }
      inputs.push_back(buffer);
    }
    SmallVector<Attribute> weights, states;
    uint64_t weightBytes = 0;
    for (FlatSymbolRefAttr w : operands.weights) {
      weights.push_back(w);
      if (auto decl = SymbolTable::lookupNearestSymbolFrom<planir::WeightOp>(module_, w)) {
        weightBytes += static_cast<uint64_t>(decl.getSize());
      }
    }
    for (FlatSymbolRefAttr s : operands.states) {
      states.push_back(s);
    }
    // Parameters: every attribute that is not a symbol.
    SmallVector<NamedAttribute> params;
    for (NamedAttribute attr : op->getAttrs()) {
      if (!llvm::is_contained(operands.symbolAttrs, attr.getName().getValue())) {
        params.push_back(attr);
      }
    }
    std::optional<uint64_t> read = 0, written = 0;
    for (Value v : inputs) {
      read = add(read, bufferBytes(v));
    }
    for (Value v : results) {
      written = add(written, bufferBytes(v));
    }
    const auto [weightRead, flops] = cost(op, weightBytes);
    read = add(read, weightRead);
    if (!read || !written || !flops) {
      return op->emitOpError() << "step " << name
                               << ": its bytes or FLOPs overflow int64 (a shape is out of range)";
    }
    const std::string kind = op->getName().stripDialect().str();
    planir::StepOp::create(
        b_, op->getLoc(), b_.getStringAttr(kind), b_.getStringAttr(name), inputs, results,
        b_.getArrayAttr(weights), b_.getArrayAttr(states), b_.getDictionaryAttr(params),
        b_.getI64IntegerAttr(static_cast<int64_t>(*read)),
        b_.getI64IntegerAttr(static_cast<int64_t>(*written)),
        b_.getI64IntegerAttr(static_cast<int64_t>(*flops)), nullptr, nullptr, nullptr);
    return success();
  }

  /// Weight bytes a step reads and the FLOPs it does: whole weights for dense ops, one row per
  /// token for the embeddings, the selected experts' share for the MoE.
  /// Either is nullopt when it overflows int64.
  using Cost = std::pair<std::optional<uint64_t>, std::optional<uint64_t>>;
  Cost cost(Operation *op, uint64_t weightBytes) {
    auto shape = [](Value v) { return cast<RankedTensorType>(v.getType()).getShape(); };
    auto dim = [](int64_t d) -> std::optional<uint64_t> {
      return d < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(d));
    };
    const std::optional<uint64_t> none = 0;
    // One row of the table per token.
    auto gather = [&](FlatSymbolRefAttr weight, Value ids) {
      auto table = SymbolTable::lookupNearestSymbolFrom<planir::WeightOp>(module_, weight);
      const uint64_t vocab = table ? std::max<int64_t>(table.getRankShape()[0], 1) : uint64_t(1);
      return Cost{mul(weightBytes / vocab, numel(shape(ids))), none};
    };
    return llvm::TypeSwitch<Operation *, Cost>(op)
        .Case<EmbeddingOp>([&](EmbeddingOp e) { return gather(e.getWeightAttr(), e.getIds()); })
        .Case<NextEmbeddingOp>(
            [&](NextEmbeddingOp e) { return gather(e.getWeightAttr(), e.getIds()); })
        .Case<LinearOp>([&](LinearOp l) {
          const auto in = shape(l.getInput()), out = shape(l.getResult());
          return Cost{weightBytes, mul(mul(2, numel(in)), dim(out[1]))};
        })
        .Case<MoeExpertsOp>([&](MoeExpertsOp m) {
          // Each token reads top_k experts (at most all of them, once each, for a batch); with
          // experts split over P ranks, a rank holds on average 1/P of the selections.
          auto gate =
              SymbolTable::lookupNearestSymbolFrom<planir::WeightOp>(module_, m.getGateAttr());
          const uint64_t experts = gate ? static_cast<uint64_t>(gate.getRankShape()[0]) : 1;
          const auto sel = shape(m.getExperts());
          const uint64_t shards = static_cast<uint64_t>(m.getExpertShards());
          const std::optional<uint64_t> selections = numel(sel);
          if (!selections) {
            return Cost{std::nullopt, std::nullopt};
          }
          const uint64_t touched = std::min<uint64_t>(experts, (*selections + shards - 1) / shards);
          const auto in = shape(m.getInput());
          const uint64_t perExpert = weightBytes / std::max<uint64_t>(experts, 1);
          const std::optional<uint64_t> inter = gate ? dim(gate.getRankShape()[1]) : 0;
          return Cost{mul(perExpert, touched), mul(mul(mul(selections, 6), inter), dim(in[1]))};
        })
        .Default([&](Operation *) { return Cost{weightBytes, none}; });
  }

  ModuleOp module_;
  OpBuilder b_;
  glm::compiler::TargetDesc target_;
  bool f32_;
  bool fp8Kv_;
  int64_t exl3Bits_;
  int64_t maxSeqs_;
  int64_t maxContext_;
  int64_t pageTokens_;
  llvm::StringMap<SmallVector<int64_t, 2>> tails_; // the unit shape of each state's tail
  llvm::StringSet<> states_;                       // the module's state symbols
  /// The positions an op reads: those of the rows a last_rows step picked where the op runs on
  /// them (the head after it), else the program's (the MTP head runs on every row after it).
  Value positionsFor(Operation *op) const {
    Value all = context_.lookup("positions");
    if (!picked_.positions) {
      return all;
    }
    Value first = op->getNumOperands() > 0 ? op->getOperand(0) : op->getResult(0);
    const int64_t rows = cast<RankedTensorType>(first.getType()).getDimSize(0);
    return rows == picked_.rows ? picked_.positions : all;
  }

  /// The current program's step context: its io buffers by slot name (ReadsStepContext).
  llvm::StringMap<Value> context_;
  /// The positions of the rows the program's last_rows step picked, once it has run.
  struct {
    Value positions;
    int64_t rows = 0;
  } picked_;
};

struct GlmToPlanPass : glm::compiler::impl::GlmToPlanPassBase<GlmToPlanPass> {
  using GlmToPlanPassBase::GlmToPlanPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<glm::compiler::TargetDesc> desc = glm::compiler::findTarget(target);
    if (!desc) {
      module.emitError() << "glm-to-plan: unknown target '" << target
                         << "' (cpu, sm_90a or sm_121a)";
      return signalPassFailure();
    }
    if (precision != "f32" && precision != "bf16") {
      module.emitError() << "glm-to-plan: precision is f32 or bf16, got '" << precision << "'";
      return signalPassFailure();
    }
    if (kv != "bf16" && kv != "fp8") {
      module.emitError() << "glm-to-plan: kv is bf16 or fp8, got '" << kv << "'";
      return signalPassFailure();
    }
    if (maxSeqs < 1 || maxContext < 1 || pageTokens < 1 || exl3Bits < 1 || exl3Bits > 8) {
      module.emitError() << "glm-to-plan: max-seqs, max-context and page-tokens must be "
                            "positive and exl3-bits in 1..8";
      return signalPassFailure();
    }
    Lowering lowering(module, *desc, precision == "f32", kv == "fp8", exl3Bits, maxSeqs, maxContext,
                      pageTokens);
    if (failed(lowering.run())) {
      signalPassFailure();
    }
  }
};

} // namespace
