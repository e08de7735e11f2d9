// ReferenceModel: loads a GLM-5.3 checkpoint's tensors as weight views and runs the text forward
// pass op by op with the CPU reference kernels, mirroring HF Glm5NextTextModel.forward.
#include "tests/unit/support/ReferenceForward.h"
#include "runtime/weights/KernelViews.h"

#include "kernels/embedding/embedding.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/kda/kda.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/linear/linear.h"
#include "kernels/mhc_post/mhc_post.h"
#include "kernels/mhc_pre/mhc_pre.h"
#include "kernels/moe_router/moe_router.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/short_conv/short_conv.h"
#include "kernels/stream_mean/stream_mean.h"
#include "kernels/swiglu/swiglu.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

namespace glm::reference {

using glm53::AttentionKind;
using glm53::Glm53Config;
using glm53::IndexerKind;
using glm53::MlpKind;
using kernels::ExpertWeights;
using kernels::WeightView;

namespace {

struct MhcWeights {
  WeightView fn, base, scale;
};

struct KdaWeights {
  WeightView qProj, kProj, vProj;
  WeightView qConv, kConv, vConv;
  WeightView fA, fB, dtBias, aLog;
  WeightView bProj;
  WeightView gA, gB, oNorm;
  WeightView oProj;
};

struct IndexerWeights {
  WeightView wqB, wk, kNormWeight, kNormBias, weightsProj, gate, ape;
};

struct DsaWeights {
  WeightView qA, qABias, qANorm, qB;
  WeightView kvA, kvABias, kvANorm, kvB;
  WeightView oProj, oProjBias;
  bool hasIndexer = false;
  IndexerWeights indexer;
};

struct MlpWeights {
  ExpertWeights dense;
  WeightView router, routerBias;
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct LayerWeights {
  MhcWeights attnHc, ffnHc;
  WeightView inputNorm, postNorm;
  KdaWeights kda;
  DsaWeights dsa;
  MlpWeights mlp;
};

/// Looks tensors up by Hub name; the first missing one becomes the load error.
class Resolver {
public:
  explicit Resolver(const Checkpoint &checkpoint) : checkpoint_(checkpoint) {}

  WeightView need(const std::string &name) {
    const TensorView *t = checkpoint_.find(name);
    if (t == nullptr) {
      if (status_.ok()) {
        status_ =
            notFound("tensor '", name, "' is missing from ", checkpoint_.directory().string());
      }
      return {};
    }
    return view(*t, name);
  }

  WeightView maybe(const std::string &name) {
    const TensorView *t = checkpoint_.find(name);
    return t == nullptr ? WeightView{} : view(*t, name);
  }

  const Status &status() const { return status_; }

private:
  /// fp8 weights bring their block scales (`<name>_scale_inv`) along.
  WeightView view(const TensorView &t, const std::string &name) {
    const TensorView *scale = nullptr;
    if (t.dtype == DType::F8_E4M3) {
      scale = checkpoint_.find(name + "_scale_inv");
      if (scale == nullptr && status_.ok()) {
        status_ = notFound("fp8 tensor '", name, "' has no '", name, "_scale_inv'");
      }
    }
    return weightViewOf(t, scale);
  }

  const Checkpoint &checkpoint_;
  Status status_;
};

ExpertWeights swigluWeights(Resolver &r, const std::string &prefix) {
  return {r.need(prefix + "gate_proj.weight"), r.need(prefix + "up_proj.weight"),
          r.need(prefix + "down_proj.weight")};
}

/// Grows `v` to at least n elements (never shrinks: earlier rows stay where they are).
void ensureSize(std::vector<float> &v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) {
    v.resize(n, 0.0f);
  }
}

} // namespace

struct ReferenceModel::Weights {
  WeightView embed, norm, lmHead;
  std::vector<LayerWeights> layers;
};

ReferenceModel::~ReferenceModel() = default;

Expected<std::unique_ptr<ReferenceModel>>
ReferenceModel::load(const std::filesystem::path &modelDir) {
  GLM_ASSIGN_OR_RETURN(Glm53Config config, glm53::loadGlm53Config(modelDir));
  if (config.qkRopeHeadDim != 0) {
    return unimplemented("qk_rope_head_dim is ", config.qkRopeHeadDim,
                         "; the reference runs the NoPE MLA of GLM-5.3 only");
  }
  if (config.scoringFunc != "sigmoid") {
    return unimplemented("scoring_func '", config.scoringFunc, "'; only sigmoid routing exists");
  }
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::open(modelDir));

  auto w = std::make_unique<Weights>();
  Resolver r(*checkpoint);
  const std::string text = "model.language_model.";
  w->embed = r.need(text + "embed_tokens.weight");
  w->norm = r.need(text + "norm.weight");
  w->lmHead = config.tieWordEmbeddings ? w->embed : r.need("lm_head.weight");
  w->layers.resize(config.numHiddenLayers);
  for (int64_t l = 0; l < config.numHiddenLayers; ++l) {
    LayerWeights &lw = w->layers[l];
    const std::string p = text + "layers." + std::to_string(l) + ".";
    lw.attnHc = {r.need(p + "hc_attn_fn"), r.need(p + "hc_attn_base"), r.need(p + "hc_attn_scale")};
    lw.ffnHc = {r.need(p + "hc_ffn_fn"), r.need(p + "hc_ffn_base"), r.need(p + "hc_ffn_scale")};
    lw.inputNorm = r.need(p + "input_layernorm.weight");
    lw.postNorm = r.need(p + "post_attention_layernorm.weight");
    const std::string a = p + "self_attn.";
    if (config.layerTypes[l] == AttentionKind::Linear) {
      KdaWeights &k = lw.kda;
      k.qProj = r.need(a + "q_proj.weight");
      k.kProj = r.need(a + "k_proj.weight");
      k.vProj = r.need(a + "v_proj.weight");
      k.qConv = r.need(a + "q_conv1d.weight");
      k.kConv = r.need(a + "k_conv1d.weight");
      k.vConv = r.need(a + "v_conv1d.weight");
      k.fA = r.need(a + "f_a_proj.weight");
      k.fB = r.need(a + "f_b_proj.weight");
      k.dtBias = r.need(a + "dt_bias");
      k.aLog = r.need(a + "A_log");
      k.bProj = r.need(a + "b_proj.weight");
      k.gA = r.need(a + "g_a_proj.weight");
      k.gB = r.need(a + "g_b_proj.weight");
      k.oNorm = r.need(a + "o_norm.weight");
      k.oProj = r.need(a + "o_proj.weight");
    } else {
      DsaWeights &d = lw.dsa;
      d.qA = r.need(a + "q_a_proj.weight");
      d.qABias = r.maybe(a + "q_a_proj.bias");
      d.qANorm = r.need(a + "q_a_layernorm.weight");
      d.qB = r.need(a + "q_b_proj.weight");
      d.kvA = r.need(a + "kv_a_proj_with_mqa.weight");
      d.kvABias = r.maybe(a + "kv_a_proj_with_mqa.bias");
      d.kvANorm = r.need(a + "kv_a_layernorm.weight");
      d.kvB = r.need(a + "kv_b_proj.weight");
      d.oProj = r.need(a + "o_proj.weight");
      d.oProjBias = r.maybe(a + "o_proj.bias");
      d.hasIndexer = config.indexerTypes[l] == IndexerKind::Full;
      if (d.hasIndexer) {
        const std::string i = a + "indexer.";
        d.indexer = {r.need(i + "wq_b.weight"),
                     r.need(i + "wk.weight"),
                     r.need(i + "k_norm.weight"),
                     r.need(i + "k_norm.bias"),
                     r.need(i + "weights_proj.weight"),
                     r.need(i + "index_kpool_compress_gate"),
                     r.need(i + "index_kpool_compress_ape")};
      }
    }
    if (config.mlpLayerTypes[l] == MlpKind::Dense) {
      lw.mlp.dense = swigluWeights(r, p + "mlp.");
    } else {
      lw.mlp.router = r.need(p + "mlp.gate.weight");
      lw.mlp.routerBias = r.maybe(p + "mlp.gate.e_score_correction_bias");
      for (int64_t e = 0; e < config.nRoutedExperts; ++e) {
        lw.mlp.experts.push_back(swigluWeights(r, p + "mlp.experts." + std::to_string(e) + "."));
      }
      if (config.nSharedExperts > 0) {
        lw.mlp.shared = swigluWeights(r, p + "mlp.shared_experts.");
      }
    }
  }
  GLM_RETURN_IF_ERROR(r.status());

  std::unique_ptr<ReferenceModel> model(new ReferenceModel());
  model->config_ = std::move(config);
  model->checkpoint_ = std::move(checkpoint);
  model->weights_ = std::move(w);
  return model;
}

SequenceState ReferenceModel::newSequence() const {
  const Glm53Config &c = config_;
  SequenceState s;
  s.layers.resize(c.numHiddenLayers);
  for (int64_t l = 0; l < c.numHiddenLayers; ++l) {
    SequenceState::Layer &ls = s.layers[l];
    if (c.layerTypes[l] == AttentionKind::Linear) {
      const int64_t conv = c.kdaProjDim() * (c.linearConvKernelDim - 1);
      ls.qConv.assign(conv, 0.0f);
      ls.kConv.assign(conv, 0.0f);
      ls.vConv.assign(conv, 0.0f);
      ls.recurrent.assign(c.linearNumHeads * c.linearHeadDim * c.linearHeadDim, 0.0f);
    } else {
      ls.openKeys.assign(c.indexKpool * c.indexHeadDim, 0.0f);
      ls.openGates.assign(c.indexKpool * c.indexHeadDim, 0.0f);
    }
  }
  return s;
}

Expected<std::vector<float>> ReferenceModel::forward(SequenceState &state,
                                                     std::span<const int32_t> tokens,
                                                     ForwardTrace *trace) const {
  const Glm53Config &c = config_;
  const Weights &w = *weights_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t h = c.hiddenSize;
  const int64_t hc = c.hcMult;
  const float eps = static_cast<float>(c.rmsNormEps);
  if (static_cast<int64_t>(state.layers.size()) != c.numHiddenLayers) {
    return invalidArgument("the sequence state was not made by this model's newSequence()");
  }
  if (trace != nullptr) {
    trace->indexerWidth =
        kernels::dsaIndexerWidth(c.indexTopk, c.indexKpool, c.indexKpoolAlwaysSelectTail);
  }

  // §2.1: hc identical residual streams from the embedding row.
  std::vector<float> streams(n * hc * h);
  std::vector<float> x(n * h), y(n * h), post(n * hc), comb(n * hc * hc);
  GLM_RETURN_IF_ERROR(kernels::embeddingRef({.tokenIds = tokens.data(),
                                             .table = w.embed,
                                             .out = streams.data(),
                                             .tokens = n,
                                             .copies = hc}));

  // mhc_pre → RMSNorm → sub-block → mhc_post, the shape of both halves of a decoder layer (§2.2).
  auto site = [&](const MhcWeights &hcw, const WeightView &norm, auto &&block) -> Status {
    GLM_RETURN_IF_ERROR(kernels::mhcPreRef({.streams = streams.data(),
                                            .fn = hcw.fn,
                                            .base = hcw.base,
                                            .scale = hcw.scale,
                                            .post = post.data(),
                                            .comb = comb.data(),
                                            .x = x.data(),
                                            .tokens = n,
                                            .hcMult = hc,
                                            .hidden = h,
                                            .sinkhornIters = c.hcSinkhornIters,
                                            .normEps = eps,
                                            .hcEps = static_cast<float>(c.hcEps)}));
    GLM_RETURN_IF_ERROR(kernels::rmsNormRef(
        {.x = x.data(), .weight = norm, .out = x.data(), .rows = n, .dim = h, .eps = eps}));
    GLM_RETURN_IF_ERROR(block());
    return kernels::mhcPostRef({.y = y.data(),
                                .residual = streams.data(),
                                .post = post.data(),
                                .comb = comb.data(),
                                .out = streams.data(),
                                .tokens = n,
                                .hcMult = hc,
                                .hidden = h});
  };

  std::vector<int32_t> sharedSelection;
  for (int64_t l = 0; l < c.numHiddenLayers; ++l) {
    const LayerWeights &lw = w.layers[l];
    if (trace != nullptr) {
      trace->layerInputs.push_back(streams);
    }
    SequenceState::Layer &ls = state.layers[l];
    GLM_RETURN_IF_ERROR(site(lw.attnHc, lw.inputNorm, [&] {
                          return attention(l, ls, n, x.data(), y.data(), trace, sharedSelection);
                        }).withContext(strCat("layer ", l, " attention")));
    GLM_RETURN_IF_ERROR(site(lw.ffnHc, lw.postNorm, [&] {
                          return mlp(l, n, x.data(), y.data());
                        }).withContext(strCat("layer ", l, " mlp")));
  }

  // §2.1: mean over the streams, final RMSNorm, lm_head.
  GLM_RETURN_IF_ERROR(kernels::streamMeanRef(
      {.streams = streams.data(), .out = x.data(), .tokens = n, .hcMult = hc, .hidden = h}));
  GLM_RETURN_IF_ERROR(kernels::rmsNormRef(
      {.x = x.data(), .weight = w.norm, .out = x.data(), .rows = n, .dim = h, .eps = eps}));
  std::vector<float> logits(n * c.vocabSize);
  GLM_RETURN_IF_ERROR(kernels::linearRef({.x = x.data(),
                                          .weight = w.lmHead,
                                          .y = logits.data(),
                                          .rows = n,
                                          .inFeatures = h,
                                          .outFeatures = c.vocabSize}));
  state.length += n;
  return logits;
}

Status ReferenceModel::attention(int64_t layer, SequenceState::Layer &state, int64_t tokens,
                                 const float *x, float *y, ForwardTrace *trace,
                                 std::vector<int32_t> &sharedSelection) const {
  if (config_.layerTypes[layer] == AttentionKind::Linear) {
    return linearAttention(layer, state, tokens, x, y);
  }
  return sparseAttention(layer, state, tokens, x, y, trace, sharedSelection);
}

/// §2.4: projections, short convs with carried state, KDA recurrence, gated norm, o_proj.
Status ReferenceModel::linearAttention(int64_t layer, SequenceState::Layer &state, int64_t n,
                                       const float *x, float *y) const {
  const Glm53Config &c = config_;
  const KdaWeights &w = weights_->layers[layer].kda;
  const int64_t h = c.hiddenSize;
  const int64_t heads = c.linearNumHeads;
  const int64_t dk = c.linearHeadDim;
  const int64_t proj = c.kdaProjDim();
  auto linear = [&](const float *in, const WeightView &weight, float *out, int64_t inF,
                    int64_t outF) {
    return kernels::linearRef(
        {.x = in, .weight = weight, .y = out, .rows = n, .inFeatures = inF, .outFeatures = outF});
  };

  std::vector<float> q(n * proj), k(n * proj), v(n * proj);
  GLM_RETURN_IF_ERROR(linear(x, w.qProj, q.data(), h, proj));
  GLM_RETURN_IF_ERROR(linear(x, w.kProj, k.data(), h, proj));
  GLM_RETURN_IF_ERROR(linear(x, w.vProj, v.data(), h, proj));
  for (auto [buf, weight, convState] : {std::tuple{q.data(), &w.qConv, state.qConv.data()},
                                        std::tuple{k.data(), &w.kConv, state.kConv.data()},
                                        std::tuple{v.data(), &w.vConv, state.vConv.data()}}) {
    GLM_RETURN_IF_ERROR(kernels::shortConvRef({.x = buf,
                                               .weight = *weight,
                                               .state = convState,
                                               .out = buf,
                                               .tokens = n,
                                               .channels = proj,
                                               .kernelSize = c.linearConvKernelDim,
                                               .activation = kernels::ConvActivation::Silu}));
  }

  // Forget-gate logits, write strengths and output gate all read the layer input x.
  std::vector<float> low(n * dk), f(n * proj), b(n * heads), gate(n * proj);
  GLM_RETURN_IF_ERROR(linear(x, w.fA, low.data(), h, dk));
  GLM_RETURN_IF_ERROR(linear(low.data(), w.fB, f.data(), dk, proj));
  GLM_RETURN_IF_ERROR(linear(x, w.bProj, b.data(), h, heads));
  GLM_RETURN_IF_ERROR(linear(x, w.gA, low.data(), h, dk));
  GLM_RETURN_IF_ERROR(linear(low.data(), w.gB, gate.data(), dk, proj));

  std::vector<float> o(n * proj);
  GLM_RETURN_IF_ERROR(kernels::kdaRef({.q = q.data(),
                                       .k = k.data(),
                                       .v = v.data(),
                                       .f = f.data(),
                                       .b = b.data(),
                                       .aLog = w.aLog,
                                       .dtBias = w.dtBias,
                                       .state = state.recurrent.data(),
                                       .out = o.data(),
                                       .tokens = n,
                                       .heads = heads,
                                       .keyDim = dk,
                                       .valueDim = dk,
                                       .lowerBound = static_cast<float>(c.linearLowerBound)}));
  GLM_RETURN_IF_ERROR(kernels::gatedRmsNormRef({.x = o.data(),
                                                .gate = gate.data(),
                                                .weight = w.oNorm,
                                                .out = o.data(),
                                                .rows = n * heads,
                                                .dim = dk,
                                                .eps = static_cast<float>(c.rmsNormEps)}));
  return linear(o.data(), w.oProj, y, proj, h);
}

/// §2.5: MLA projections, the KPool indexer (or the previous full layer's selection), sparse MLA,
/// o_proj.
Status ReferenceModel::sparseAttention(int64_t layer, SequenceState::Layer &state, int64_t n,
                                       const float *x, float *y, ForwardTrace *trace,
                                       std::vector<int32_t> &sharedSelection) const {
  const Glm53Config &c = config_;
  const DsaWeights &w = weights_->layers[layer].dsa;
  const int64_t h = c.hiddenSize;
  const int64_t heads = c.numAttentionHeads;
  const float eps = static_cast<float>(c.rmsNormEps);
  auto linear = [&](const float *in, const WeightView &weight, const WeightView &bias, float *out,
                    int64_t inF, int64_t outF) {
    return kernels::linearRef({.x = in,
                               .weight = weight,
                               .bias = bias,
                               .y = out,
                               .rows = n,
                               .inFeatures = inF,
                               .outFeatures = outF});
  };

  // cq = RMSNorm(q_a(x)) ("q_resid", also the indexer's query input); Q = q_b(cq).
  std::vector<float> cq(n * c.qLoraRank), q(n * heads * c.qkHeadDim());
  GLM_RETURN_IF_ERROR(linear(x, w.qA, w.qABias, cq.data(), h, c.qLoraRank));
  GLM_RETURN_IF_ERROR(kernels::rmsNormRef({.x = cq.data(),
                                           .weight = w.qANorm,
                                           .out = cq.data(),
                                           .rows = n,
                                           .dim = c.qLoraRank,
                                           .eps = eps}));
  GLM_RETURN_IF_ERROR(linear(cq.data(), w.qB, {}, q.data(), c.qLoraRank, heads * c.qkHeadDim()));
  // The latent c = RMSNorm(kv_a(x)): what the cache keeps per token.
  std::vector<float> latent(n * c.kvLoraRank);
  GLM_RETURN_IF_ERROR(linear(x, w.kvA, w.kvABias, latent.data(), h, c.kvLoraRank));
  GLM_RETURN_IF_ERROR(kernels::rmsNormRef({.x = latent.data(),
                                           .weight = w.kvANorm,
                                           .out = latent.data(),
                                           .rows = n,
                                           .dim = c.kvLoraRank,
                                           .eps = eps}));

  const int64_t width =
      kernels::dsaIndexerWidth(c.indexTopk, c.indexKpool, c.indexKpoolAlwaysSelectTail);
  if (w.hasIndexer) {
    const IndexerWeights &iw = w.indexer;
    const int64_t d = c.indexHeadDim;
    const int64_t ih = c.indexNHeads;
    std::vector<float> qI(n * ih * d), kI(n * d), gI(n * d), wI(n * ih);
    GLM_RETURN_IF_ERROR(linear(cq.data(), iw.wqB, {}, qI.data(), c.qLoraRank, ih * d));
    GLM_RETURN_IF_ERROR(linear(x, iw.wk, {}, kI.data(), h, d));
    GLM_RETURN_IF_ERROR(kernels::layerNormRef({.x = kI.data(),
                                               .weight = iw.kNormWeight,
                                               .bias = iw.kNormBias,
                                               .out = kI.data(),
                                               .rows = n,
                                               .dim = d,
                                               .eps = 1e-6f}));
    GLM_RETURN_IF_ERROR(linear(x, iw.gate, {}, gI.data(), h, d));
    GLM_RETURN_IF_ERROR(linear(x, iw.weightsProj, {}, wI.data(), h, ih));

    kernels::DsaIndexerCache &cache = state.indexer;
    const int64_t pools = (cache.length + n) / c.indexKpool;
    ensureSize(state.poolKeys, std::max<int64_t>(pools, 1) * d);
    cache.poolKeys = state.poolKeys.data();
    cache.maxPools = static_cast<int64_t>(state.poolKeys.size()) / d;
    cache.openKeys = state.openKeys.data();
    cache.openGates = state.openGates.data();
    sharedSelection.assign(n * width, -1);
    std::vector<float> scores;
    if (trace != nullptr) {
      scores.assign(n * std::max<int64_t>(pools, 1), 0.0f);
    }
    GLM_RETURN_IF_ERROR(kernels::dsaIndexerRef({.q = qI.data(),
                                                .k = kI.data(),
                                                .gate = gI.data(),
                                                .headWeights = wI.data(),
                                                .ape = iw.ape,
                                                .cache = &cache,
                                                .selected = sharedSelection.data(),
                                                .poolScores = trace ? scores.data() : nullptr,
                                                .poolScoresStride = std::max<int64_t>(pools, 1),
                                                .tokens = n,
                                                .heads = ih,
                                                .headDim = d,
                                                .topk = c.indexTopk,
                                                .kpool = c.indexKpool,
                                                .alwaysSelectTail = c.indexKpoolAlwaysSelectTail,
                                                .tieRule = tieRule_}));
    if (trace != nullptr) {
      trace->indexerSelections.push_back(sharedSelection);
      trace->indexerScores.push_back(std::move(scores));
      trace->indexerScoreStrides.push_back(std::max<int64_t>(pools, 1));
    }
  } else if (static_cast<int64_t>(sharedSelection.size()) != n * width) {
    return invalidArgument("a shared indexer layer needs an earlier full indexer layer");
  }

  kernels::MlaLatentCache &cache = state.mla;
  ensureSize(state.latents, (cache.length + n) * c.kvLoraRank);
  cache.latents = state.latents.data();
  cache.maxTokens = static_cast<int64_t>(state.latents.size()) / c.kvLoraRank;
  std::vector<float> o(n * heads * c.vHeadDim);
  GLM_RETURN_IF_ERROR(kernels::mlaSparseAttentionRef(
      {.q = q.data(),
       .latent = latent.data(),
       .kvB = w.kvB,
       .selected = sharedSelection.data(),
       .cache = &cache,
       .out = o.data(),
       .tokens = n,
       .heads = heads,
       .qkHeadDim = c.qkHeadDim(),
       .vHeadDim = c.vHeadDim,
       .kvLoraRank = c.kvLoraRank,
       .selectedWidth = width,
       .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.qkHeadDim())))}));
  return linear(o.data(), w.oProj, w.oProjBias, y, heads * c.vHeadDim, h);
}

/// §2.6 dense clamped SwiGLU, or §2.7 router + routed experts + shared expert.
Status ReferenceModel::mlp(int64_t layer, int64_t n, const float *x, float *y) const {
  const Glm53Config &c = config_;
  const MlpWeights &w = weights_->layers[layer].mlp;
  const float limit = static_cast<float>(c.swigluLimit);
  if (c.mlpLayerTypes[layer] == MlpKind::Dense) {
    return kernels::swigluRef({.x = x,
                               .gate = w.dense.gate,
                               .up = w.dense.up,
                               .down = w.dense.down,
                               .out = y,
                               .tokens = n,
                               .hidden = c.hiddenSize,
                               .intermediate = c.intermediateSize,
                               .limit = limit});
  }
  const int64_t k = c.numExpertsPerTok;
  std::vector<int32_t> ids(n * k);
  std::vector<float> weights(n * k);
  GLM_RETURN_IF_ERROR(
      kernels::moeRouterRef({.x = x,
                             .weight = w.router,
                             .correctionBias = w.routerBias,
                             .expertIds = ids.data(),
                             .expertWeights = weights.data(),
                             .tokens = n,
                             .hidden = c.hiddenSize,
                             .experts = c.nRoutedExperts,
                             .topK = k,
                             .nGroup = c.nGroup,
                             .topkGroup = c.topkGroup,
                             .normTopkProb = c.normTopkProb,
                             .routedScalingFactor = static_cast<float>(c.routedScalingFactor),
                             .tieRule = tieRule_}));
  return kernels::moeExpertsRef({.x = x,
                                 .expertIds = ids.data(),
                                 .expertWeights = weights.data(),
                                 .experts = w.experts.data(),
                                 .shared = c.nSharedExperts > 0 ? &w.shared : nullptr,
                                 .out = y,
                                 .tokens = n,
                                 .hidden = c.hiddenSize,
                                 .numExperts = c.nRoutedExperts,
                                 .topK = k,
                                 .intermediate = c.moeIntermediateSize,
                                 .sharedIntermediate = c.sharedExpertIntermediateSize(),
                                 .swigluLimit = limit});
}

} // namespace glm::reference
