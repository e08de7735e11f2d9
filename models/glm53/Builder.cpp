// The GLM-5.3 model description: reads like the HF forward pass, one builder function per block,
// and carries no kernel, tile or grid choice.
#include "models/glm53/Builder.h"

#include "ir/glm/GlmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <map>
#include <set>

namespace glm::glm53 {

using namespace mlir;
using ir::ShardKind;

std::string ProgramShape::name() const {
  if (kind == Kind::Prefill) {
    return "prefill_c" + std::to_string(rows);
  }
  return "decode_b" + std::to_string(batch) + "_r" + std::to_string(rows);
}

namespace {

/// The checkpoint prefix of layer L's tensors.
std::string layerPrefix(int64_t layer) {
  return "model.language_model.layers." + std::to_string(layer) + ".";
}

Type elementTypeFor(MLIRContext *ctx, ir::WeightFormat format) {
  switch (format) {
  case ir::WeightFormat::F16:
    return Float16Type::get(ctx);
  case ir::WeightFormat::F32:
    return Float32Type::get(ctx);
  case ir::WeightFormat::FP8:
    return Float8E4M3FNType::get(ctx);
  case ir::WeightFormat::BF16:
  case ir::WeightFormat::EXL3: // logically bf16; the format says how it is decoded
    return BFloat16Type::get(ctx);
  }
  return BFloat16Type::get(ctx);
}

ir::WeightFormat releaseFormat(const WeightInfo &w) {
  return w.releaseDType == DType::F32 ? ir::WeightFormat::F32 : ir::WeightFormat::BF16;
}

/// Emits one module: declarations on first use, ops at the builder's insertion point.
class ModelBuilder {
public:
  ModelBuilder(MLIRContext &ctx, const Glm53Config &config, const WeightFormatFn &formatOf,
               bool mtp)
      : ctx_(ctx), c_(config), b_(&ctx), formatOf_(formatOf), mtp_(mtp) {
    for (const WeightInfo &w : glm53Weights(config)) {
      table_.emplace(w.name, w);
    }
  }

  Expected<OwningOpRef<ModuleOp>> build(const std::vector<ProgramShape> &programs) {
    if (mtp_ && !c_.hasMtp()) {
      return invalidArgument("the checkpoint has no MTP layer (num_nextn_predict_layers is 0)");
    }
    module_ = ModuleOp::create(b_.getUnknownLoc());
    for (const ProgramShape &program : programs) {
      buildProgram(program);
      if (!error_.ok()) {
        return error_;
      }
    }
    if (failed(verify(*module_))) {
      return internalError("the GLM-5.3 model description does not verify (see diagnostics)");
    }
    return std::move(module_);
  }

private:
  //===--------------------------------------------------------------------===//
  // Declarations
  //===--------------------------------------------------------------------===//

  /// Declares (once) the weight `irName` read from checkpoint tensor `checkpoint`.
  FlatSymbolRefAttr weight(const std::string &irName, const std::string &checkpoint,
                           ShardKind shard, int64_t shardDim = 0) {
    if (!declared_.count(irName)) {
      auto it = table_.find(checkpoint);
      if (it == table_.end()) {
        fail("tensor table has no '", checkpoint, "'");
        return FlatSymbolRefAttr::get(&ctx_, irName);
      }
      declareWeight(irName, checkpoint, it->second.shape, it->second, shard, shardDim);
    }
    return FlatSymbolRefAttr::get(&ctx_, irName);
  }

  /// Declares (once) the stacked weight of every routed expert's `proj` in one layer.
  FlatSymbolRefAttr expertWeight(const std::string &irName, int64_t layer, const char *proj) {
    if (!declared_.count(irName)) {
      const std::string expert0 = layerPrefix(layer) + "mlp.experts.0." + proj + ".weight";
      auto it = table_.find(expert0);
      if (it == table_.end()) {
        fail("tensor table has no '", expert0, "'");
        return FlatSymbolRefAttr::get(&ctx_, irName);
      }
      std::vector<int64_t> shape = {c_.nRoutedExperts};
      shape.insert(shape.end(), it->second.shape.begin(), it->second.shape.end());
      declareWeight(irName, layerPrefix(layer) + "mlp.experts.{e}." + proj + ".weight", shape,
                    it->second, ShardKind::Expert, 0);
    }
    return FlatSymbolRefAttr::get(&ctx_, irName);
  }

  void declareWeight(const std::string &irName, const std::string &checkpoint,
                     const std::vector<int64_t> &shape, const WeightInfo &info, ShardKind shard,
                     int64_t shardDim) {
    const ir::WeightFormat format = formatOf_ ? formatOf_(info) : releaseFormat(info);
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPoint(firstProgram_);
    auto type = RankedTensorType::get(shape, elementTypeFor(&ctx_, format));
    ir::WeightOp::create(b_, at(irName), b_.getStringAttr(irName), TypeAttr::get(type),
                         b_.getStringAttr(checkpoint), ir::WeightFormatAttr::get(&ctx_, format),
                         ir::ShardAttr::get(&ctx_, shard, shardDim), nullptr);
    declared_.insert(irName);
  }

  /// Declares (once) a per-sequence state.
  FlatSymbolRefAttr state(const std::string &irName, std::vector<int64_t> shape,
                          ir::StateKind kind) {
    if (!declared_.count(irName)) {
      OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(firstProgram_);
      ir::StateOp::create(b_, at(irName), b_.getStringAttr(irName),
                          TypeAttr::get(RankedTensorType::get(shape, b_.getF32Type())),
                          ir::StateKindAttr::get(&ctx_, kind));
      declared_.insert(irName);
    }
    return FlatSymbolRefAttr::get(&ctx_, irName);
  }

  //===--------------------------------------------------------------------===//
  // Helpers
  //===--------------------------------------------------------------------===//

  template <typename... Args> void fail(Args &&...args) {
    if (error_.ok()) {
      error_ = internalError(std::forward<Args>(args)...);
    }
  }

  Location at(const std::string &name) { return NameLoc::get(b_.getStringAttr(name)); }
  RankedTensorType rows(int64_t width) { return RankedTensorType::get({n_, width}, f32()); }
  Type f32() { return b_.getF32Type(); }
  FloatAttr f64(double v) { return b_.getF64FloatAttr(v); }
  IntegerAttr i64(int64_t v) { return b_.getI64IntegerAttr(v); }

  Value linear(const std::string &name, Value x, FlatSymbolRefAttr w, int64_t out,
               FlatSymbolRefAttr bias = {}) {
    return ir::LinearOp::create(b_, at(name), rows(out), x, w, bias);
  }

  Value rmsNorm(const std::string &name, Value x, FlatSymbolRefAttr w) {
    return ir::RmsNormOp::create(b_, at(name), x.getType(), x, w, f64(c_.rmsNormEps), nullptr);
  }

  //===--------------------------------------------------------------------===//
  // Program
  //===--------------------------------------------------------------------===//

  void buildProgram(const ProgramShape &program) {
    n_ = program.tokens();
    const int64_t h = c_.hiddenSize, s = c_.hcMult;
    const int64_t headRows = program.lastRowLogits ? program.batch : n_;
    auto idsType = RankedTensorType::get({n_}, b_.getI32Type());
    // The sampler's token and its alternatives per head row, their ids and their logprobs.
    auto idsOutType =
        RankedTensorType::get({headRows, 1 + ir::kSampleAlternatives}, b_.getI32Type());
    auto logprobsType = RankedTensorType::get({headRows, 1 + ir::kSampleAlternatives}, f32());
    auto logitsType = RankedTensorType::get({headRows, c_.vocabSize}, f32());
    SmallVector<Type, 4> resultTypes = {logitsType, idsOutType, logprobsType};
    if (mtp_) {
      resultTypes.push_back(idsOutType); // the MTP head's draws
    }
    auto fnType = b_.getFunctionType({idsType}, resultTypes);
    b_.setInsertionPointToEnd(module_->getBody());
    auto fn = func::FuncOp::create(b_, at(program.name()), program.name(), fnType);
    fn->setAttr(
        "glm.program",
        b_.getDictionaryAttr({
            b_.getNamedAttr("kind", b_.getStringAttr(program.kind == ProgramShape::Kind::Prefill
                                                         ? "prefill"
                                                         : "decode")),
            b_.getNamedAttr("batch", i64(program.batch)),
            b_.getNamedAttr("rows", i64(program.rows)),
            b_.getNamedAttr("logits",
                            b_.getStringAttr(program.lastRowLogits ? "last_row" : "every_row")),
        }));
    // Declarations go before the first program, in order of first use.
    if (firstProgram_ == nullptr) {
      firstProgram_ = fn;
    }
    Block *entry = b_.createBlock(&fn.getBody(), {}, {idsType}, {at("tokens")});

    // Every input token is counted for the sampler's penalties, before anything reads them.
    FlatSymbolRefAttr counts = state("sample.counts", {c_.vocabSize}, ir::StateKind::TokenCounts);
    ir::CountTokensOp::create(b_, at("embed.count_tokens"), entry->getArgument(0), counts);

    // Embedding, copied into hc_mult identical residual streams.
    Value e = ir::EmbeddingOp::create(
        b_, at("embed"), rows(h), entry->getArgument(0),
        weight("embed.tokens", "model.language_model.embed_tokens.weight", ShardKind::Replicated));
    Value x = ir::ExpandStreamsOp::create(b_, at("embed.streams"),
                                          RankedTensorType::get({n_, s, h}, f32()), e);
    Value selection; // the last full indexer's top-k, for "shared" indexer layers
    for (int64_t layer = 0; layer < c_.numHiddenLayers; ++layer) {
      x = decoderLayer(layer, x, selection);
    }

    // Head: unweighted mean of the streams, final norm, lm_head, sampling; on each sequence's last
    // row alone where only that row's logits are read. The MTP head reads every row's normed
    // output, so with it the norm runs first.
    Value tokens = entry->getArgument(0);
    Value normed = ir::StreamMeanOp::create(b_, at("head.stream_mean"), rows(h), x);
    FlatSymbolRefAttr headNorm =
        weight("head.norm", "model.language_model.norm.weight", ShardKind::Replicated);
    Value trunkOut;
    if (mtp_) {
      normed = trunkOut = rmsNorm("head.norm", normed, headNorm);
    }
    if (program.lastRowLogits) {
      normed = ir::LastRowsOp::create(b_, at("head.last_row"),
                                      RankedTensorType::get({headRows, h}, f32()), normed);
      n_ = headRows; // the head's ops are row-wise: they run on these rows
    }
    if (!mtp_) {
      normed = rmsNorm("head.norm", normed, headNorm);
    }
    auto [logits, sample] = head("head", normed, counts, /*greedy=*/false);
    SmallVector<Value, 4> results = {logits, sample.getIds(), sample.getLogprobs()};
    if (mtp_) {
      n_ = program.tokens();
      results.push_back(mtpHead(program, tokens, sample.getIds(), trunkOut, counts));
    }
    func::ReturnOp::create(b_, at("return"), results);
  }

  FlatSymbolRefAttr lmHead() {
    return c_.tieWordEmbeddings ? FlatSymbolRefAttr::get(&ctx_, "embed.tokens")
                                : weight("head.lm_head", "lm_head.weight", ShardKind::Column, 0);
  }

  /// lm_head and the sampler over normed rows: the trunk's head, and the MTP head's (greedy).
  std::pair<Value, ir::SampleOp> head(const std::string &p, Value normed, FlatSymbolRefAttr counts,
                                      bool greedy) {
    const int64_t k = 1 + ir::kSampleAlternatives;
    Value logits = linear(p + ".logits", normed, lmHead(), c_.vocabSize);
    auto sample = ir::SampleOp::create(
        b_, at(p + ".sample"), RankedTensorType::get({n_, k}, b_.getI32Type()),
        RankedTensorType::get({n_, k}, f32()), logits, counts, greedy ? b_.getUnitAttr() : nullptr);
    return {logits, sample};
  }

  /// reference/glm53_arch.md §2.8: the MTP head, on every row of the step (its attention and
  /// indexer keep their own rows of every position, as a layer does), guessing the token two
  /// past each row's from the trunk's normed output there and the token that follows it.
  /// Returns its greedy draws: of every row, or of each sequence's last where the trunk's head
  /// ran on that row alone.
  Value mtpHead(const ProgramShape &program, Value tokens, Value sampled, Value trunkOut,
                FlatSymbolRefAttr counts) {
    const int64_t layer = c_.numHiddenLayers, h = c_.hiddenSize;
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const std::string ck = layerPrefix(layer);
    auto norm = [&](const std::string &name, Value x, const std::string &tensor) {
      return rmsNorm(blk + name, x, weight(blk + name, ck + tensor, ShardKind::Replicated));
    };
    Value e =
        ir::NextEmbeddingOp::create(b_, at(blk + "next_embed"), rows(h), tokens, sampled,
                                    FlatSymbolRefAttr::get(&ctx_, "embed.tokens"),
                                    b_.getBoolAttr(program.kind == ProgramShape::Kind::Prefill));
    Value en = norm("enorm", e, "enorm.weight");
    Value hn = norm("hnorm", trunkOut, "hnorm.weight");
    Value joined = ir::ConcatOp::create(b_, at(blk + "eh_concat"), rows(2 * h), ValueRange{en, hn});
    Value u = linear(blk + "eh_proj", joined,
                     weight(blk + "eh_proj", ck + "eh_proj.weight", ShardKind::Replicated), h);
    Value selection; // its own indexer
    Value y = dsa(layer, blk + "attn.", norm("attn_norm", u, "input_layernorm.weight"), selection,
                  /*fullIndexer=*/true);
    u = ir::AddOp::create(b_, at(blk + "attn_residual"), u, y);
    y = moe(layer, blk + "ffn.", norm("ffn_norm", u, "post_attention_layernorm.weight"));
    u = ir::AddOp::create(b_, at(blk + "ffn_residual"), u, y);
    if (program.lastRowLogits) {
      u = ir::LastRowsOp::create(b_, at(blk + "last_row"),
                                 RankedTensorType::get({program.batch, h}, f32()), u);
      n_ = program.batch;
    }
    return head(blk + "head", norm("head_norm", u, "shared_head.norm.weight"), counts,
                /*greedy=*/true)
        .second.getIds();
  }

  /// reference/glm53_arch.md §2.2: mHC around the token mixer, then around the MLP.
  Value decoderLayer(int64_t layer, Value streams, Value &selection) {
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const std::string ck = layerPrefix(layer);

    auto [attnIn, attnPost, attnComb] = mhcPre(blk + "attn_hc", ck + "hc_attn_", streams);
    Value x =
        rmsNorm(blk + "attn_norm", attnIn,
                weight(blk + "attn_norm", ck + "input_layernorm.weight", ShardKind::Replicated));
    Value y =
        c_.layerTypes[layer] == AttentionKind::Linear
            ? kda(layer, blk + "attn.", x)
            : dsa(layer, blk + "attn.", x, selection, c_.indexerTypes[layer] == IndexerKind::Full);
    streams = ir::MhcPostOp::create(b_, at(blk + "attn_hc.post"), streams.getType(), y, attnPost,
                                    attnComb, streams);

    auto [ffnIn, ffnPost, ffnComb] = mhcPre(blk + "ffn_hc", ck + "hc_ffn_", streams);
    x = rmsNorm(
        blk + "ffn_norm", ffnIn,
        weight(blk + "ffn_norm", ck + "post_attention_layernorm.weight", ShardKind::Replicated));
    y = c_.mlpLayerTypes[layer] == MlpKind::Dense
            ? mlp(blk + "ffn.", ck + "mlp.", x, c_.intermediateSize)
            : moe(layer, blk + "ffn.", x);
    return ir::MhcPostOp::create(b_, at(blk + "ffn_hc.post"), streams.getType(), y, ffnPost,
                                 ffnComb, streams);
  }

  /// reference/glm53_arch.md §2.3.
  std::tuple<Value, Value, Value> mhcPre(const std::string &name, const std::string &ck,
                                         Value streams) {
    const int64_t s = c_.hcMult;
    // Declared one by one: argument evaluation order would otherwise decide declaration order.
    FlatSymbolRefAttr fn = weight(name + ".fn", ck + "fn", ShardKind::Replicated);
    FlatSymbolRefAttr base = weight(name + ".base", ck + "base", ShardKind::Replicated);
    FlatSymbolRefAttr scale = weight(name + ".scale", ck + "scale", ShardKind::Replicated);
    auto op = ir::MhcPreOp::create(
        b_, at(name), rows(c_.hiddenSize), rows(s), RankedTensorType::get({n_, s, s}, f32()),
        streams, fn, base, scale, f64(c_.rmsNormEps), f64(c_.hcEps), i64(c_.hcSinkhornIters));
    return {op.getInput(), op.getPost(), op.getComb()};
  }

  /// reference/glm53_arch.md §2.4: Kimi Delta Attention.
  Value kda(int64_t layer, const std::string &p, Value x) {
    const std::string ck = layerPrefix(layer) + "self_attn.";
    const int64_t h = c_.hiddenSize, heads = c_.linearNumHeads, dk = c_.linearHeadDim;
    const int64_t proj = c_.kdaProjDim(), kernel = c_.linearConvKernelDim;
    auto project = [&](const char *which) {
      const std::string name = std::string(which) + "_proj";
      Value u =
          linear(p + name, x, weight(p + name, ck + name + ".weight", ShardKind::Column), proj);
      const std::string conv = std::string(which) + "_conv1d";
      return Value(ir::ShortConvOp::create(
          b_, at(p + conv), u.getType(), u,
          weight(p + conv, ck + conv + ".weight", ShardKind::Column),
          state(p + conv + ".state", {kernel - 1, proj}, ir::StateKind::ConvWindow)));
    };
    Value q = project("q"), k = project("k"), v = project("v");
    Value fa = linear(p + "f_a_proj", x,
                      weight(p + "f_a_proj", ck + "f_a_proj.weight", ShardKind::Replicated), dk);
    Value f = linear(p + "f_b_proj", fa,
                     weight(p + "f_b_proj", ck + "f_b_proj.weight", ShardKind::Column), proj);
    Value beta = linear(p + "b_proj", x,
                        weight(p + "b_proj", ck + "b_proj.weight", ShardKind::Column), heads);
    FlatSymbolRefAttr aLog = weight(p + "A_log", ck + "A_log", ShardKind::Head);
    FlatSymbolRefAttr dtBias = weight(p + "dt_bias", ck + "dt_bias", ShardKind::Column);
    // The output gate's projections before the recurrence, so that the gated norm follows the
    // recurrence at once (plan-fuse-kda-norm folds the two where the pair is adjacent).
    Value ga = linear(p + "g_a_proj", x,
                      weight(p + "g_a_proj", ck + "g_a_proj.weight", ShardKind::Replicated), dk);
    Value gate = linear(p + "g_b_proj", ga,
                        weight(p + "g_b_proj", ck + "g_b_proj.weight", ShardKind::Column), proj);
    FlatSymbolRefAttr recurrent =
        state(p + "kda.state", {heads, dk, dk}, ir::StateKind::KdaRecurrent);
    Value o = ir::KdaOp::create(b_, at(p + "kda"), rows(proj), q, k, v, f, beta, aLog, dtBias,
                                recurrent, i64(heads), i64(dk), f64(c_.linearLowerBound));
    Value normed =
        ir::GatedNormOp::create(b_, at(p + "o_norm"), rows(proj), o, gate,
                                weight(p + "o_norm", ck + "o_norm.weight", ShardKind::Replicated),
                                f64(c_.rmsNormEps), i64(dk));
    return linear(p + "o_proj", normed,
                  weight(p + "o_proj", ck + "o_proj.weight", ShardKind::Row, 1), h);
  }

  /// reference/glm53_arch.md §2.5: NoPE MLA over the KPool indexer's selection: its own
  /// (`fullIndexer`), or the last full indexer's before it.
  Value dsa(int64_t layer, const std::string &p, Value x, Value &selection, bool fullIndexer) {
    const std::string ck = layerPrefix(layer) + "self_attn.";
    const std::string ik = ck + "indexer.";
    const int64_t h = c_.hiddenSize, heads = c_.numAttentionHeads;
    auto bias = [&](const std::string &name) {
      return c_.attentionBias
                 ? weight(p + name + ".bias", ck + name + ".bias", ShardKind::Replicated)
                 : FlatSymbolRefAttr();
    };
    Value cq = linear(p + "q_a_proj", x,
                      weight(p + "q_a_proj", ck + "q_a_proj.weight", ShardKind::Replicated),
                      c_.qLoraRank, bias("q_a_proj"));
    cq = rmsNorm(p + "q_a_norm", cq,
                 weight(p + "q_a_norm", ck + "q_a_layernorm.weight", ShardKind::Replicated));
    Value q = linear(p + "q_b_proj", cq,
                     weight(p + "q_b_proj", ck + "q_b_proj.weight", ShardKind::Head, 0),
                     heads * c_.qkHeadDim());
    Value latent =
        linear(p + "kv_a_proj", x,
               weight(p + "kv_a_proj", ck + "kv_a_proj_with_mqa.weight", ShardKind::Replicated),
               c_.kvLoraRank + c_.qkRopeHeadDim, bias("kv_a_proj_with_mqa"));
    latent = rmsNorm(p + "kv_a_norm", latent,
                     weight(p + "kv_a_norm", ck + "kv_a_layernorm.weight", ShardKind::Replicated));

    if (fullIndexer || !selection) {
      selection = indexer(p + "indexer.", ik, x, cq);
    }
    FlatSymbolRefAttr kvB = weight(p + "kv_b_proj", ck + "kv_b_proj.weight", ShardKind::Head, 0);
    FlatSymbolRefAttr latentState =
        state(p + "mla.latent", {c_.kvLoraRank}, ir::StateKind::MlaLatent);
    Value o = ir::MlaSparseAttentionOp::create(
        b_, at(p + "mla"), rows(heads * c_.vHeadDim), q, latent, selection, kvB, latentState,
        i64(heads), i64(c_.qkHeadDim()), i64(c_.vHeadDim),
        f64(1.0 / std::sqrt(static_cast<double>(c_.qkHeadDim()))));
    return linear(p + "o_proj", o, weight(p + "o_proj", ck + "o_proj.weight", ShardKind::Row, 1), h,
                  bias("o_proj"));
  }

  Value indexer(const std::string &p, const std::string &ck, Value x, Value cq) {
    const int64_t heads = c_.indexNHeads, d = c_.indexHeadDim;
    Value qi = linear(p + "wq_b", cq, weight(p + "wq_b", ck + "wq_b.weight", ShardKind::Replicated),
                      heads * d);
    Value ki = linear(p + "wk", x, weight(p + "wk", ck + "wk.weight", ShardKind::Replicated), d);
    // LayerNorm eps is fixed at 1e-6 in the reference (not rms_norm_eps).
    FlatSymbolRefAttr kNormWeight =
        weight(p + "k_norm.weight", ck + "k_norm.weight", ShardKind::Replicated);
    FlatSymbolRefAttr kNormBias =
        weight(p + "k_norm.bias", ck + "k_norm.bias", ShardKind::Replicated);
    ki = ir::LayerNormOp::create(b_, at(p + "k_norm"), ki.getType(), ki, kNormWeight, kNormBias,
                                 f64(1e-6));
    Value gi = linear(
        p + "kpool_gate", x,
        weight(p + "kpool_gate", ck + "index_kpool_compress_gate", ShardKind::Replicated), d);
    Value wi = linear(p + "weights_proj", x,
                      weight(p + "weights_proj", ck + "weights_proj.weight", ShardKind::Replicated),
                      heads);
    auto selType = RankedTensorType::get({n_, c_.indexTopk + c_.indexKpool - 1}, b_.getI32Type());
    FlatSymbolRefAttr ape =
        weight(p + "kpool_ape", ck + "index_kpool_compress_ape", ShardKind::Replicated);
    FlatSymbolRefAttr keys = state(p + "keys", {d}, ir::StateKind::IndexKeys);
    return ir::DsaIndexerOp::create(b_, at(p + "topk"), selType, qi, ki, gi, wi, ape, keys,
                                    i64(heads), i64(d), i64(c_.indexKpool), i64(c_.indexTopk));
  }

  /// reference/glm53_arch.md §2.6: the clamped SwiGLU MLP (dense layers, shared experts).
  Value mlp(const std::string &p, const std::string &ck, Value x, int64_t width) {
    Value gate = linear(p + "gate_proj", x,
                        weight(p + "gate_proj", ck + "gate_proj.weight", ShardKind::Column), width);
    Value up = linear(p + "up_proj", x,
                      weight(p + "up_proj", ck + "up_proj.weight", ShardKind::Column), width);
    Value act =
        ir::SwiGluOp::create(b_, at(p + "swiglu"), gate.getType(), gate, up, f64(c_.swigluLimit));
    return linear(p + "down_proj", act,
                  weight(p + "down_proj", ck + "down_proj.weight", ShardKind::Row, 1),
                  c_.hiddenSize);
  }

  /// reference/glm53_arch.md §2.7: router, routed experts, shared expert.
  Value moe(int64_t layer, const std::string &p, Value x) {
    const std::string ck = layerPrefix(layer) + "mlp.";
    const int64_t k = c_.numExpertsPerTok;
    FlatSymbolRefAttr routerWeight =
        weight(p + "router", ck + "gate.weight", ShardKind::Replicated);
    FlatSymbolRefAttr routerBias =
        weight(p + "router.bias", ck + "gate.e_score_correction_bias", ShardKind::Replicated);
    auto router = ir::MoeRouterOp::create(
        b_, at(p + "router"), RankedTensorType::get({n_, k}, b_.getI32Type()), rows(k), x,
        routerWeight, routerBias, i64(k), i64(c_.nGroup), i64(c_.topkGroup),
        b_.getBoolAttr(c_.normTopkProb), f64(c_.routedScalingFactor));
    FlatSymbolRefAttr gate = expertWeight(p + "experts.gate_proj", layer, "gate_proj");
    FlatSymbolRefAttr up = expertWeight(p + "experts.up_proj", layer, "up_proj");
    FlatSymbolRefAttr down = expertWeight(p + "experts.down_proj", layer, "down_proj");
    Value routed =
        ir::MoeExpertsOp::create(b_, at(p + "experts"), x.getType(), x, router.getExperts(),
                                 router.getWeights(), gate, up, down, f64(c_.swigluLimit));
    Value shared = mlp(p + "shared.", ck + "shared_experts.", x, c_.sharedExpertIntermediateSize());
    return ir::AddOp::create(b_, at(p + "sum"), routed, shared);
  }

  MLIRContext &ctx_;
  const Glm53Config &c_;
  OpBuilder b_;
  WeightFormatFn formatOf_;
  bool mtp_ = false;
  std::map<std::string, WeightInfo> table_;
  OwningOpRef<ModuleOp> module_;
  Operation *firstProgram_ = nullptr;
  std::set<std::string> declared_;
  int64_t n_ = 1;
  Status error_;
};

} // namespace

Expected<OwningOpRef<ModuleOp>> buildGlm53Module(MLIRContext &context, const Glm53Config &config,
                                                 const std::vector<ProgramShape> &programs,
                                                 const WeightFormatFn &formatOf, bool mtp) {
  context.loadDialect<ir::GlmDialect, func::FuncDialect>();
  ModelBuilder builder(context, config, formatOf, mtp);
  return builder.build(programs);
}

} // namespace glm::glm53
