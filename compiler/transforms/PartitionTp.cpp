//===- PartitionTp.cpp - split a model across tensor-parallel ranks -------===//
//
// Global shapes in, per-rank shapes out (DESIGN.md §4). The algorithm:
//  1. Every sharded glm.weight gets its per-rank type; the global shape stays
//     in a `glm.global_shape` attribute.
//  2. Walking each program in order, every value gets a distribution:
//     replicated, split along a dimension, or a partial sum. Each op states
//     what it needs of its operands and what it produces, from the shard of the
//     weights it reads (see `visit`).
//  3. Where an operand's distribution is not what its user needs, a collective
//     is inserted before the user: all_reduce for a partial sum, all_gather
//     for a split value. Head counts and per-rank states shrink with the ops.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "ir/glm/GlmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace glm::compiler {
#define GEN_PASS_DEF_GLMPARTITIONTPPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
using namespace glm::ir;

namespace {

/// How a value is spread over the ranks.
struct Dist {
  enum Kind { Replicated, Split, Partial } kind = Replicated;
  int64_t dim = 0; // for Split

  static Dist replicated() { return {}; }
  static Dist split(int64_t dim) { return {Split, dim}; }
  static Dist partial() { return {Partial, 0}; }
  bool operator==(const Dist &o) const { return kind == o.kind && (kind != Split || dim == o.dim); }
};

class Partitioner {
public:
  Partitioner(ModuleOp module, int64_t tp) : module_(module), symbols_(module), tp_(tp) {}

  LogicalResult run() {
    module_->setAttr("glm.tp", IntegerAttr::get(IntegerType::get(module_.getContext(), 64), tp_));
    if (tp_ == 1) {
      return success(); // one rank holds everything: nothing splits, nothing to communicate
    }
    if (failed(partitionWeights())) {
      return failure();
    }
    for (auto fn : module_.getOps<func::FuncOp>()) {
      if (failed(partitionFunc(fn))) {
        return failure();
      }
    }
    return success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Declarations
  //===--------------------------------------------------------------------===//

  LogicalResult partitionWeights() {
    for (WeightOp weight : module_.getOps<WeightOp>()) {
      ShardAttr shard = weight.getShard();
      if (shard.getKind() == ShardKind::Replicated) {
        continue;
      }
      RankedTensorType type = weight.getTensorType();
      FailureOr<RankedTensorType> local = splitType(weight, type, shard.getDim());
      if (failed(local)) {
        return failure();
      }
      weight->setAttr("glm.global_shape",
                      DenseI64ArrayAttr::get(weight.getContext(), type.getShape()));
      weight.setTypeAttr(TypeAttr::get(*local));
    }
    return success();
  }

  /// `type` with dimension `dim` divided by tp; an error on `op` when it does not divide.
  FailureOr<RankedTensorType> splitType(Operation *op, RankedTensorType type, int64_t dim) {
    const int64_t size = type.getDimSize(dim);
    if (size % tp_ != 0) {
      return op->emitOpError() << "dimension " << dim << " (" << size << ") does not split across "
                               << tp_ << " ranks";
    }
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] /= tp_;
    return RankedTensorType::get(shape, type.getElementType());
  }

  ShardKind shardOf(FlatSymbolRefAttr ref) {
    auto weight = symbols_.lookup<WeightOp>(ref.getValue());
    return weight ? weight.getShard().getKind() : ShardKind::Replicated;
  }

  /// Shrinks a state's slot along `dim`, once.
  LogicalResult splitState(Operation *user, FlatSymbolRefAttr ref, int64_t dim) {
    auto state = symbols_.lookup<StateOp>(ref.getValue());
    if (!state || !splitStates_.insert(state).second) {
      return success();
    }
    FailureOr<RankedTensorType> local = splitType(user, state.getType(), dim);
    if (failed(local)) {
      return failure();
    }
    state.setTypeAttr(TypeAttr::get(*local));
    return success();
  }

  //===--------------------------------------------------------------------===//
  // Values
  //===--------------------------------------------------------------------===//

  Dist distOf(Value v) {
    auto it = dist_.find(v);
    return it == dist_.end() ? Dist::replicated() : it->second;
  }

  /// Makes operand `i` of `op` replicated, inserting a collective before `op` if needed.
  void needReplicated(Operation *op, unsigned i) {
    Value v = op->getOperand(i);
    const Dist d = distOf(v);
    if (d.kind == Dist::Replicated) {
      return;
    }
    auto cached = gathered_.find(v);
    if (cached != gathered_.end()) {
      op->setOperand(i, cached->second);
      return;
    }
    OpBuilder b(module_.getContext());
    b.setInsertionPointAfterValue(v);
    std::string name = "collective";
    if (auto loc = dyn_cast<NameLoc>(v.getLoc())) {
      name = loc.getName().str();
    }
    auto type = cast<RankedTensorType>(v.getType());
    Value full;
    if (d.kind == Dist::Partial) {
      full = AllReduceOp::create(b, NameLoc::get(b.getStringAttr(name + ".all_reduce")), type, v,
                                 b.getI64IntegerAttr(tp_));
    } else {
      SmallVector<int64_t> shape(type.getShape());
      shape[d.dim] *= tp_;
      full = AllGatherOp::create(b, NameLoc::get(b.getStringAttr(name + ".all_gather")),
                                 RankedTensorType::get(shape, type.getElementType()), v,
                                 b.getI64IntegerAttr(d.dim), b.getI64IntegerAttr(tp_));
    }
    gathered_[v] = full;
    op->setOperand(i, full);
  }

  void needAllReplicated(Operation *op) {
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      needReplicated(op, i);
    }
  }

  /// Gives result `i` of `op` distribution `d`, shrinking its type when split.
  LogicalResult produce(Operation *op, unsigned i, Dist d) {
    Value r = op->getResult(i);
    if (d.kind == Dist::Split) {
      FailureOr<RankedTensorType> local = splitType(op, cast<RankedTensorType>(r.getType()), d.dim);
      if (failed(local)) {
        return failure();
      }
      r.setType(*local);
    }
    dist_[r] = d;
    return success();
  }

  LogicalResult produceAll(Operation *op, Dist d) {
    for (unsigned i = 0; i < op->getNumResults(); ++i) {
      if (failed(produce(op, i, d))) {
        return failure();
      }
    }
    return success();
  }

  /// Whether every operand in `indices` has distribution `d`.
  bool all(Operation *op, std::initializer_list<unsigned> indices, Dist d) {
    for (unsigned i : indices) {
      if (!(distOf(op->getOperand(i)) == d)) {
        return false;
      }
    }
    return true;
  }

  //===--------------------------------------------------------------------===//
  // Ops
  //===--------------------------------------------------------------------===//

  LogicalResult partitionFunc(func::FuncOp fn) {
    for (Block &block : fn.getBody()) {
      for (Operation &op : llvm::make_early_inc_range(block)) {
        if (failed(visit(&op))) {
          return failure();
        }
      }
    }
    // Result types of the function follow its (replicated) returned values.
    auto ret = cast<func::ReturnOp>(fn.getBody().back().getTerminator());
    fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(), ret.getOperandTypes()));
    return success();
  }

  LogicalResult visit(Operation *op) {
    const Dist cols = Dist::split(1);
    if (isa<AllGatherOp, AllReduceOp>(op)) {
      return success();
    }
    if (auto linear = dyn_cast<LinearOp>(op)) {
      switch (shardOf(linear.getWeightAttr())) {
      case ShardKind::Column:
      case ShardKind::Head:
        if (linear.getBiasAttr() && shardOf(linear.getBiasAttr()) == ShardKind::Replicated) {
          return op->emitOpError() << "a column-split linear needs a column-split bias";
        }
        needReplicated(op, 0);
        return produce(op, 0, cols);
      case ShardKind::Row:
        if (linear.getBiasAttr()) {
          return op->emitOpError() << "a row-split linear with a bias would add it on every rank";
        }
        if (!(distOf(linear.getInput()) == cols)) {
          return op->emitOpError() << "a row-split weight needs its input split along its "
                                      "features (from a column-split producer)";
        }
        return produce(op, 0, Dist::partial());
      case ShardKind::Replicated:
        needReplicated(op, 0);
        return produce(op, 0, Dist::replicated());
      case ShardKind::Expert:
        return op->emitOpError() << "a linear cannot read expert-split weights";
      }
    }
    if (auto conv = dyn_cast<ShortConvOp>(op)) {
      if (shardOf(conv.getWeightAttr()) == ShardKind::Replicated) {
        needReplicated(op, 0);
        return produce(op, 0, Dist::replicated());
      }
      if (!(distOf(conv.getInput()) == cols)) {
        return op->emitOpError() << "a channel-split conv needs channel-split input";
      }
      if (failed(splitState(op, conv.getStateAttr(), 1))) {
        return failure();
      }
      return produce(op, 0, cols);
    }
    if (auto kda = dyn_cast<KdaOp>(op)) {
      if (shardOf(kda.getALogAttr()) == ShardKind::Replicated) {
        needAllReplicated(op);
        return produce(op, 0, Dist::replicated());
      }
      if (!all(op, {0, 1, 2, 3, 4}, cols)) {
        return op->emitOpError() << "head-split KDA needs q, k, v, f and b split by heads";
      }
      if (kda.getNumHeads() % tp_ != 0) {
        return op->emitOpError() << kda.getNumHeads() << " heads do not split across " << tp_
                                 << " ranks";
      }
      kda.setNumHeadsAttr(
          IntegerAttr::get(kda.getNumHeadsAttr().getType(), kda.getNumHeads() / tp_));
      if (failed(splitState(op, kda.getStateAttr(), 0))) {
        return failure();
      }
      return produce(op, 0, cols);
    }
    if (auto mla = dyn_cast<MlaSparseAttentionOp>(op)) {
      needReplicated(op, 1); // the latent: every rank attends over the full cache
      needReplicated(op, 2); // the selection
      if (shardOf(mla.getKvBAttr()) == ShardKind::Replicated) {
        needReplicated(op, 0);
        return produce(op, 0, Dist::replicated());
      }
      if (!(distOf(mla.getQueries()) == cols)) {
        return op->emitOpError() << "head-split attention needs head-split queries";
      }
      if (mla.getNumHeads() % tp_ != 0) {
        return op->emitOpError() << mla.getNumHeads() << " heads do not split across " << tp_
                                 << " ranks";
      }
      mla.setNumHeadsAttr(
          IntegerAttr::get(mla.getNumHeadsAttr().getType(), mla.getNumHeads() / tp_));
      return produce(op, 0, cols);
    }
    if (auto experts = dyn_cast<MoeExpertsOp>(op)) {
      needAllReplicated(op);
      if (shardOf(experts.getGateAttr()) != ShardKind::Expert) {
        return produce(op, 0, Dist::replicated());
      }
      experts.setExpertShardsAttr(IntegerAttr::get(experts.getExpertShardsAttr().getType(), tp_));
      return produce(op, 0, Dist::partial());
    }
    if (auto norm = dyn_cast<RmsNormOp>(op)) {
      // A per-group norm stays local when the split keeps whole groups on each rank.
      const Dist d = distOf(norm.getInput());
      if (d == cols && norm.getGroup() &&
          cast<RankedTensorType>(norm.getInput().getType()).getDimSize(1) % *norm.getGroup() == 0) {
        return produce(op, 0, cols);
      }
      needReplicated(op, 0);
      return produce(op, 0, Dist::replicated());
    }
    if (auto norm = dyn_cast<GatedNormOp>(op)) {
      if (all(op, {0, 1}, cols) &&
          cast<RankedTensorType>(norm.getInput().getType()).getDimSize(1) % norm.getGroup() == 0) {
        return produce(op, 0, cols);
      }
      needAllReplicated(op);
      return produce(op, 0, Dist::replicated());
    }
    if (isa<SwiGluOp>(op)) {
      // Elementwise, but not linear: partial sums must be summed first.
      if (all(op, {0, 1}, cols)) {
        return produce(op, 0, cols);
      }
      needAllReplicated(op);
      return produce(op, 0, Dist::replicated());
    }
    if (isa<AddOp>(op)) {
      const Dist d = distOf(op->getOperand(0));
      if (d.kind != Dist::Replicated && distOf(op->getOperand(1)) == d) {
        return produce(op, 0, d); // split + split, or partial + partial
      }
      needAllReplicated(op);
      return produce(op, 0, Dist::replicated());
    }
    // Everything else (embedding, mHC, norms with weights, the router, the indexer, sampling,
    // concat, the function's return) runs replicated.
    needAllReplicated(op);
    return produceAll(op, Dist::replicated());
  }

  ModuleOp module_;
  SymbolTable symbols_;
  int64_t tp_;
  llvm::DenseMap<Value, Dist> dist_;
  llvm::DenseMap<Value, Value> gathered_;
  llvm::DenseSet<Operation *> splitStates_;
};

struct PartitionTpPass : glm::compiler::impl::GlmPartitionTpPassBase<PartitionTpPass> {
  using GlmPartitionTpPassBase::GlmPartitionTpPassBase;

  void runOnOperation() override {
    if (tp < 1) {
      getOperation().emitError() << "glm-partition-tp: tp must be at least 1, got " << tp;
      return signalPassFailure();
    }
    if (failed(Partitioner(getOperation(), tp).run())) {
      signalPassFailure();
    }
  }
};

} // namespace
