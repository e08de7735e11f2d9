//===- GlmOps.cpp - glm op verifiers --------------------------------------===//
//
// Shape verifiers (verify()) check operands against each other; symbol
// verifiers (verifySymbolUses) check them against the weights and states they
// name, so a model description whose shapes disagree with its checkpoint
// tensors is rejected before any pass runs.
//
//===----------------------------------------------------------------------===//

#include "ir/glm/GlmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <optional>

using namespace mlir;
using namespace glm::ir;

#include "ir/glm/GlmInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "ir/glm/GlmOps.cpp.inc"

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

/// "[8192, 4096]", for diagnostics.
std::string shapeText(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

/// The product (or sum) of shape dimensions and attributes a verifier compares against, or nullopt
/// when it leaves int64: a hand-written or damaged module may carry any shape (a dynamic
/// dimension is INT64_MIN) and attribute, and must be refused, not overflowed.
std::optional<int64_t> mul(int64_t a, int64_t b) { return llvm::checkedMul(a, b); }
std::optional<int64_t> add(int64_t a, int64_t b) { return llvm::checkedAdd(a, b); }

LogicalResult overflows(Operation *op, StringRef what) {
  return op->emitOpError() << what << " overflows int64 (a shape or attribute is out of range)";
}

/// Looks up the glm.weight `ref` names and checks its shape.
LogicalResult checkWeight(Operation *op, SymbolTableCollection &symbols, FlatSymbolRefAttr ref,
                          StringRef role, ArrayRef<int64_t> expected) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(op, ref);
  if (!weight) {
    return op->emitOpError() << role << " " << ref << " does not name a glm.weight";
  }
  ArrayRef<int64_t> shape = weight.getTensorType().getShape();
  if (shape != expected) {
    return op->emitOpError() << role << " " << ref << " has shape " << shapeText(shape)
                             << ", expected " << shapeText(expected);
  }
  return success();
}

/// Looks up the glm.state `ref` names and checks its kind.
LogicalResult checkState(Operation *op, SymbolTableCollection &symbols, FlatSymbolRefAttr ref,
                         StateKind kind, StateOp *out = nullptr) {
  auto state = symbols.lookupNearestSymbolFrom<StateOp>(op, ref);
  if (!state) {
    return op->emitOpError() << "state " << ref << " does not name a glm.state";
  }
  if (state.getKind() != kind) {
    return op->emitOpError() << "state " << ref << " is " << stringifyStateKind(state.getKind())
                             << ", expected " << stringifyStateKind(kind);
  }
  if (out != nullptr) {
    *out = state;
  }
  return success();
}

/// Checks that `v` has shape `expected`.
LogicalResult checkShape(Operation *op, Value v, StringRef role, ArrayRef<int64_t> expected) {
  if (shapeOf(v) != expected) {
    return op->emitOpError() << role << " has shape " << shapeText(shapeOf(v)) << ", expected "
                             << shapeText(expected);
  }
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  if (getCheckpoint().empty()) {
    return emitOpError() << "needs the checkpoint tensor name it reads";
  }
  const int64_t rank = getTensorType().getRank();
  if (getShard().getKind() != ShardKind::Replicated && getShard().getDim() >= rank) {
    return emitOpError() << "shard dimension " << getShard().getDim() << " is outside rank "
                         << rank;
  }
  if (isPerExpert() && rank < 2) {
    return emitOpError() << "per-expert weights stack experts along dimension 0, so need rank >= 2";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding, streams, norms, linear
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verifySymbolUses(SymbolTableCollection &symbols) {
  ArrayRef<int64_t> out = shapeOf(getResult());
  if (out[0] != shapeOf(getIds())[0]) {
    return emitOpError() << "gives " << out[0] << " rows for " << shapeOf(getIds())[0] << " ids";
  }
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getWeightAttr());
  if (!weight || weight.getTensorType().getRank() != 2) {
    return emitOpError() << "weight " << getWeightAttr() << " must name a 2-D glm.weight";
  }
  return checkWeight(*this, symbols, getWeightAttr(), "weight",
                     {weight.getTensorType().getDimSize(0), out[1]});
}

LogicalResult NextEmbeddingOp::verify() {
  const int64_t rows = shapeOf(getIds())[0];
  ArrayRef<int64_t> sampled = shapeOf(getSampled());
  if (shapeOf(getResult())[0] != rows) {
    return emitOpError() << "gives " << shapeOf(getResult())[0] << " rows for " << rows << " ids";
  }
  if (sampled[1] != 1 + kSampleAlternatives || sampled[0] < 1 ||
      (sampled[0] != rows && (!getFollowInput() || rows % sampled[0] != 0))) {
    return emitOpError() << "reads the draws of every row [" << rows << ", "
                         << 1 + kSampleAlternatives
                         << "] (or, following the input, of each sequence's last), not "
                         << shapeText(sampled);
  }
  return success();
}

LogicalResult NextEmbeddingOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getWeightAttr());
  if (!weight || weight.getTensorType().getRank() != 2) {
    return emitOpError() << "weight " << getWeightAttr() << " must name a 2-D glm.weight";
  }
  return checkWeight(*this, symbols, getWeightAttr(), "weight",
                     {weight.getTensorType().getDimSize(0), shapeOf(getResult())[1]});
}

LogicalResult ExpandStreamsOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (out[0] != in[0] || out[2] != in[1]) {
    return emitOpError() << "expands " << shapeText(in) << " into " << shapeText(out)
                         << "; expected [N, S, H] from [N, H]";
  }
  return success();
}

LogicalResult StreamMeanOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (out[0] != in[0] || out[1] != in[2]) {
    return emitOpError() << "collapses " << shapeText(in) << " into " << shapeText(out)
                         << "; expected [N, H] from [N, S, H]";
  }
  return success();
}

LogicalResult RmsNormOp::verify() {
  const int64_t last = shapeOf(getInput()).back();
  if (getGroup() && (*getGroup() <= 0 || last % *getGroup() != 0)) {
    return emitOpError() << "group " << *getGroup() << " does not divide the last dimension "
                         << last;
  }
  if (getEps().convertToDouble() <= 0) {
    return emitOpError() << "eps must be positive";
  }
  return success();
}

LogicalResult RmsNormOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!getWeightAttr()) {
    return success();
  }
  const int64_t width = getGroup() ? *getGroup() : shapeOf(getInput()).back();
  return checkWeight(*this, symbols, getWeightAttr(), "weight", {width});
}

LogicalResult LayerNormOp::verifySymbolUses(SymbolTableCollection &symbols) {
  const int64_t width = shapeOf(getInput()).back();
  if (failed(checkWeight(*this, symbols, getWeightAttr(), "weight", {width}))) {
    return failure();
  }
  return checkWeight(*this, symbols, getBiasAttr(), "bias", {width});
}

LogicalResult LinearOp::verifySymbolUses(SymbolTableCollection &symbols) {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (in[0] != out[0]) {
    return emitOpError() << "maps " << in[0] << " rows to " << out[0];
  }
  if (failed(checkWeight(*this, symbols, getWeightAttr(), "weight", {out[1], in[1]}))) {
    return failure();
  }
  if (getBiasAttr()) {
    return checkWeight(*this, symbols, getBiasAttr(), "bias", {out[1]});
  }
  return success();
}

//===----------------------------------------------------------------------===//
// mHC
//===----------------------------------------------------------------------===//

LogicalResult MhcPreOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getStreams());
  const int64_t n = x[0], s = x[1], h = x[2];
  if (failed(checkShape(*this, getInput(), "input result", {n, h})) ||
      failed(checkShape(*this, getPost(), "post result", {n, s})) ||
      failed(checkShape(*this, getComb(), "comb result", {n, s, s}))) {
    return failure();
  }
  if (getSinkhornIters() < 1) {
    return emitOpError() << "needs at least one Sinkhorn iteration";
  }
  return success();
}

LogicalResult MhcPreOp::verifySymbolUses(SymbolTableCollection &symbols) {
  ArrayRef<int64_t> x = shapeOf(getStreams());
  const int64_t s = x[1], h = x[2];
  const std::optional<int64_t> streams = add(2, s);
  const std::optional<int64_t> mix = streams ? mul(*streams, s) : std::nullopt;
  const std::optional<int64_t> width = mul(s, h);
  if (!mix || !width) {
    return overflows(*this, "the mixer shape [(2 + S) S, S H]");
  }
  if (failed(checkWeight(*this, symbols, getFnAttr(), "fn", {*mix, *width})) ||
      failed(checkWeight(*this, symbols, getBaseAttr(), "base", {*mix}))) {
    return failure();
  }
  return checkWeight(*this, symbols, getScaleAttr(), "scale", {3});
}

LogicalResult MhcPostOp::verify() {
  ArrayRef<int64_t> r = shapeOf(getResidual());
  const int64_t n = r[0], s = r[1], h = r[2];
  if (failed(checkShape(*this, getOutput(), "block output", {n, h})) ||
      failed(checkShape(*this, getPost(), "post", {n, s})) ||
      failed(checkShape(*this, getComb(), "comb", {n, s, s}))) {
    return failure();
  }
  return checkShape(*this, getResult(), "result", r);
}

//===----------------------------------------------------------------------===//
// KDA
//===----------------------------------------------------------------------===//

LogicalResult ShortConvOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getWeightAttr());
  if (!weight || weight.getTensorType().getRank() != 3) {
    return emitOpError() << "weight " << getWeightAttr() << " must name a [C, 1, K] glm.weight";
  }
  const int64_t channels = shapeOf(getInput())[1];
  const int64_t kernel = weight.getTensorType().getDimSize(2);
  if (failed(checkWeight(*this, symbols, getWeightAttr(), "weight", {channels, 1, kernel}))) {
    return failure();
  }
  StateOp state;
  if (failed(checkState(*this, symbols, getStateAttr(), StateKind::ConvWindow, &state))) {
    return failure();
  }
  const std::optional<int64_t> past = add(kernel, -1);
  if (!past) {
    return overflows(*this, "the window length K - 1");
  }
  const std::vector<int64_t> window = {*past, channels};
  if (state.getType().getShape() != ArrayRef<int64_t>(window)) {
    return emitOpError() << "state " << getStateAttr() << " must hold the last K-1 inputs, "
                         << shapeText(window);
  }
  return success();
}

LogicalResult KdaOp::verify() {
  const int64_t n = shapeOf(getQ())[0];
  const int64_t heads = getNumHeads();
  const std::optional<int64_t> width = mul(getNumHeads(), getHeadDim());
  if (!width) {
    return overflows(*this, "num_heads x head_dim");
  }
  for (auto [value, role] : {std::pair{getQ(), "q"}, std::pair{getK(), "k"}, std::pair{getV(), "v"},
                             std::pair{getF(), "f"}, std::pair{getResult(), "result"}}) {
    if (failed(checkShape(*this, value, role, {n, *width}))) {
      return failure();
    }
  }
  if (getLowerBound().convertToDouble() >= 0) {
    return emitOpError() << "lower_bound must be negative: it scales a sigmoid into a log decay";
  }
  return checkShape(*this, getB(), "b", {n, heads});
}

LogicalResult KdaOp::verifySymbolUses(SymbolTableCollection &symbols) {
  const int64_t heads = getNumHeads(), d = getHeadDim();
  const std::optional<int64_t> width = mul(heads, d);
  if (!width) {
    return overflows(*this, "num_heads x head_dim");
  }
  if (failed(checkWeight(*this, symbols, getALogAttr(), "a_log", {heads})) ||
      failed(checkWeight(*this, symbols, getDtBiasAttr(), "dt_bias", {*width}))) {
    return failure();
  }
  StateOp state;
  if (failed(checkState(*this, symbols, getStateAttr(), StateKind::KdaRecurrent, &state))) {
    return failure();
  }
  const std::vector<int64_t> expected = {heads, d, d};
  if (state.getType().getShape() != ArrayRef<int64_t>(expected)) {
    return emitOpError() << "state " << getStateAttr() << " must be " << shapeText(expected);
  }
  return success();
}

LogicalResult GatedNormOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (shapeOf(getInput()) != shapeOf(getGate()) || shapeOf(getInput()) != shapeOf(getResult())) {
    return emitOpError() << "input, gate and result must have one shape";
  }
  if (getGroup() <= 0 || shapeOf(getInput())[1] % getGroup() != 0) {
    return emitOpError() << "group " << getGroup() << " does not divide " << shapeOf(getInput())[1];
  }
  return checkWeight(*this, symbols, getWeightAttr(), "weight", {static_cast<int64_t>(getGroup())});
}

//===----------------------------------------------------------------------===//
// DSA
//===----------------------------------------------------------------------===//

LogicalResult DsaIndexerOp::verify() {
  const int64_t n = shapeOf(getQueries())[0], d = getHeadDim();
  const int64_t heads = getNumHeads(), kpool = getKpool(), topk = getTopk();
  if (kpool < 1 || topk % kpool != 0) {
    return emitOpError() << "topk " << getTopk() << " must be a multiple of kpool " << getKpool();
  }
  const std::optional<int64_t> width = mul(heads, d);
  const std::optional<int64_t> pools = add(topk, kpool - 1);
  if (!width || !pools) {
    return overflows(*this, "num_heads x head_dim or topk + kpool - 1");
  }
  if (failed(checkShape(*this, getQueries(), "queries", {n, *width})) ||
      failed(checkShape(*this, getKeys(), "keys", {n, d})) ||
      failed(checkShape(*this, getGates(), "gates", {n, d})) ||
      failed(checkShape(*this, getHeadWeights(), "head weights", {n, heads}))) {
    return failure();
  }
  return checkShape(*this, getResult(), "result", {n, *pools});
}

LogicalResult DsaIndexerOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(checkWeight(*this, symbols, getApeAttr(), "ape",
                         {static_cast<int64_t>(getKpool()), static_cast<int64_t>(getHeadDim())}))) {
    return failure();
  }
  return checkState(*this, symbols, getStateAttr(), StateKind::IndexKeys);
}

LogicalResult MlaSparseAttentionOp::verify() {
  const int64_t n = shapeOf(getQueries())[0], heads = getNumHeads();
  const int64_t qk = getQkHeadDim(), v = getVHeadDim();
  const std::optional<int64_t> queries = mul(heads, qk), values = mul(heads, v);
  if (!queries || !values) {
    return overflows(*this, "num_heads x head width");
  }
  if (failed(checkShape(*this, getQueries(), "queries", {n, *queries})) ||
      failed(checkShape(*this, getResult(), "result", {n, *values}))) {
    return failure();
  }
  if (shapeOf(getLatent())[0] != n || shapeOf(getSelection())[0] != n) {
    return emitOpError() << "latent and selection must have " << n << " rows";
  }
  return success();
}

LogicalResult MlaSparseAttentionOp::verifySymbolUses(SymbolTableCollection &symbols) {
  const int64_t rank = shapeOf(getLatent())[1];
  const int64_t heads = getNumHeads(), qk = getQkHeadDim(), v = getVHeadDim();
  const std::optional<int64_t> perHead = add(qk, v);
  const std::optional<int64_t> rows = perHead ? mul(heads, *perHead) : std::nullopt;
  if (!rows) {
    return overflows(*this, "num_heads x (qk_head_dim + v_head_dim)");
  }
  if (failed(checkWeight(*this, symbols, getKvBAttr(), "kv_b", {*rows, rank}))) {
    return failure();
  }
  return checkState(*this, symbols, getStateAttr(), StateKind::MlaLatent);
}

//===----------------------------------------------------------------------===//
// MoE
//===----------------------------------------------------------------------===//

LogicalResult MoeRouterOp::verify() {
  const int64_t n = shapeOf(getInput())[0], k = getTopK();
  if (failed(checkShape(*this, getExperts(), "expert ids", {n, k})) ||
      failed(checkShape(*this, getWeights(), "expert weights", {n, k}))) {
    return failure();
  }
  if (getNGroup() < 1 || getTopkGroup() < 1 || getTopkGroup() > getNGroup()) {
    return emitOpError() << "needs 1 <= topk_group <= n_group";
  }
  return success();
}

LogicalResult MoeRouterOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getWeightAttr());
  if (!weight || weight.getTensorType().getRank() != 2) {
    return emitOpError() << "weight " << getWeightAttr() << " must name an [E, H] glm.weight";
  }
  const int64_t experts = weight.getTensorType().getDimSize(0);
  if (static_cast<int64_t>(getTopK()) > experts ||
      experts % static_cast<int64_t>(getNGroup()) != 0) {
    return emitOpError() << "top_k " << getTopK() << " and n_group " << getNGroup()
                         << " do not fit " << experts << " experts";
  }
  if (failed(checkWeight(*this, symbols, getWeightAttr(), "weight",
                         {experts, shapeOf(getInput())[1]}))) {
    return failure();
  }
  return checkWeight(*this, symbols, getBiasAttr(), "bias", {experts});
}

LogicalResult MoeExpertsOp::verify() {
  if (getExpertShards() < 1) {
    return emitOpError() << "expert_shards must be at least 1";
  }
  if (shapeOf(getExperts()) != shapeOf(getWeights())) {
    return emitOpError() << "expert ids and weights must have one shape";
  }
  if (shapeOf(getExperts())[0] != shapeOf(getInput())[0]) {
    return emitOpError() << "needs one row of experts per input row";
  }
  return checkShape(*this, getResult(), "result", shapeOf(getInput()));
}

LogicalResult MoeExpertsOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto gate = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getGateAttr());
  if (!gate || gate.getTensorType().getRank() != 3) {
    return emitOpError() << "gate " << getGateAttr() << " must name an [E, I, H] glm.weight";
  }
  const int64_t e = gate.getTensorType().getDimSize(0), i = gate.getTensorType().getDimSize(1);
  const int64_t h = shapeOf(getInput())[1];
  if (failed(checkWeight(*this, symbols, getGateAttr(), "gate", {e, i, h})) ||
      failed(checkWeight(*this, symbols, getUpAttr(), "up", {e, i, h}))) {
    return failure();
  }
  return checkWeight(*this, symbols, getDownAttr(), "down", {e, h, i});
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty()) {
    return emitOpError() << "needs at least one input";
  }
  const int64_t n = shapeOf(getResult())[0];
  int64_t width = 0;
  for (Value v : getInputs()) {
    if (shapeOf(v)[0] != n) {
      return emitOpError() << "inputs must all have " << n << " rows";
    }
    const std::optional<int64_t> sum = add(width, shapeOf(v)[1]);
    if (!sum) {
      return overflows(*this, "the summed input width");
    }
    width = *sum;
  }
  return checkShape(*this, getResult(), "result", {n, width});
}

LogicalResult AllGatherOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  const int64_t axis = getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(in.size()) || in.size() != out.size()) {
    return emitOpError() << "axis " << axis << " is outside the operand's rank";
  }
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    const std::optional<int64_t> expected = d == axis ? mul(in[d], getWorld()) : in[d];
    if (!expected) {
      return overflows(*this, "the gathered dimension");
    }
    if (out[d] != *expected) {
      return emitOpError() << "gathers " << shapeText(in) << " from " << getWorld()
                           << " ranks along " << axis << " into " << shapeText(out);
    }
  }
  return success();
}

LogicalResult LastRowsOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (in.size() != 2 || out.size() != 2 || in[1] != out[1] || out[0] < 1 || in[0] % out[0] != 0) {
    return emitOpError() << "takes [B R, D] to [B, D], not " << shapeText(in) << " to "
                         << shapeText(out);
  }
  return success();
}

LogicalResult CountTokensOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return checkState(*this, symbols, getCountsAttr(), StateKind::TokenCounts, nullptr);
}

LogicalResult SampleOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits()), ids = shapeOf(getIds()),
                    logprobs = shapeOf(getLogprobs());
  if (ids != logprobs || ids[0] != logits[0] || ids[1] != 1 + kSampleAlternatives) {
    return emitOpError() << "takes [N, V] logits to ids and logprobs of [N, "
                         << 1 + kSampleAlternatives << "], not " << shapeText(logits) << " to "
                         << shapeText(ids) << " and " << shapeText(logprobs);
  }
  return success();
}

LogicalResult SampleOp::verifySymbolUses(SymbolTableCollection &symbols) {
  StateOp state;
  if (failed(checkState(*this, symbols, getCountsAttr(), StateKind::TokenCounts, &state))) {
    return failure();
  }
  const int64_t vocab = shapeOf(getLogits())[1];
  if (state.getType().getShape() != ArrayRef<int64_t>{vocab}) {
    return emitOpError() << "state " << getCountsAttr() << " must count the " << vocab
                         << " tokens of the logits, not " << shapeText(state.getType().getShape());
  }
  return success();
}
