// Step-by-step plan execution on the CPU with the reference kernels.
#include "runtime/engine/CpuEngine.h"

#include "kernels/add/add.h"
#include "kernels/argmax/argmax.h"
#include "kernels/concat/concat.h"
#include "kernels/dsa_indexer/dsa_indexer.h"
#include "kernels/embedding/embedding.h"
#include "kernels/exl3/exl3.h"
#include "kernels/expand_streams/expand_streams.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/kda/kda.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/linear/linear.h"
#include "kernels/mhc_post/mhc_post.h"
#include "kernels/mhc_pre/mhc_pre.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"
#include "kernels/moe_experts/moe_experts.h"
#include "kernels/moe_router/moe_router.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/short_conv/short_conv.h"
#include "kernels/stream_mean/stream_mean.h"
#include "kernels/swiglu/swiglu.h"
#include "runtime/plan/Collectives.h"
#include "runtime/plan/StepView.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensorsWriter.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fnmatch.h>

namespace glm::runtime {

CpuEngine::~CpuEngine() = default;

Expected<std::unique_ptr<CpuEngine>> CpuEngine::create(std::unique_ptr<PlanFile> planFile,
                                                       const Checkpoint &checkpoint,
                                                       CpuEngineOptions options) {
  const plan::Plan &p = planFile->root();
  if (p.target()->arch() != plan::Arch::Cpu) {
    return invalidArgument(planFile->source(), ": compiled for ", p.target()->name()->str(),
                           "; the CPU backend runs plans compiled with --target cpu");
  }
  if (p.precision() != plan::Precision::F32) {
    return invalidArgument(planFile->source(), ": the CPU backend runs f32 plans "
                                               "(compile with --precision f32)");
  }
  const int world = options.comm != nullptr ? options.comm->world() : 1;
  if (static_cast<int>(p.tp()) != world) {
    return invalidArgument(planFile->source(), ": a TP ", p.tp(),
                           " plan needs a communicator of that many ranks (given ", world, ")");
  }
  std::unique_ptr<CpuEngine> engine(new CpuEngine());
  engine->options_ = options;
  engine->rank_ = options.comm != nullptr ? options.comm->rank() : 0;
  for (const plan::Arena *a : *p.arenas()) {
    engine->arenas_.emplace_back((a->size() + 7) / 8, 0);
  }
  for (uint32_t i = 0; i < p.arenas()->size(); ++i) {
    if (p.arenas()->Get(i)->kind() == plan::ArenaKind::Weights) {
      auto *weights = reinterpret_cast<uint8_t *>(engine->arenas_[i].data());
      GLM_RETURN_IF_ERROR(loadPlanWeights(p, checkpoint, static_cast<uint32_t>(engine->rank_),
                                          {weights, engine->arenas_[i].size() * 8}));
    }
  }
  GLM_RETURN_IF_ERROR(engine->initCommon(p, planFile->source()));
  if (const plan::StatePool *pool = p.state_pool()) {
    engine->pageBytes_ = pool->page_bytes();
  }
  // Each indexer's open-pool tail lives in a per-sequence slot named after it.
  if (p.states() != nullptr) {
    for (uint32_t i = 0; i < p.states()->size(); ++i) {
      const std::string name = p.states()->Get(i)->name()->str();
      for (uint32_t j = 0; j < p.states()->size(); ++j) {
        if (p.states()->Get(j)->name()->str() == name + ".tail") {
          engine->tailOf_[i] = j;
        }
      }
      const plan::StateLayout *s = p.states()->Get(i);
      if (s->paged() && s->element() != plan::ElementType::F32) {
        return invalidArgument(planFile->source(), ": state ", name, " is not f32");
      }
    }
  }
  engine->plan_ = std::move(planFile);
  return engine;
}

Status CpuEngine::clearSlots(int slot) {
  // A new sequence starts from zero state: clear its slots of every per-sequence state.
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      std::memset(address(*s->slice()) + slot * s->unit_bytes(), 0, s->unit_bytes());
    }
  }
  return Status::success();
}

float *CpuEngine::pagedRow(const plan::StateLayout &state, int slot, int64_t row,
                           int64_t rowsPerPage) {
  const int32_t page = sequences_.pages(slot)[static_cast<size_t>(row / rowsPerPage)];
  return reinterpret_cast<float *>(address(*state.slice()) + page * pageBytes_ +
                                   state.offset_in_page() +
                                   (row % rowsPerPage) * state.unit_bytes());
}

bool CpuEngine::matchesDump(const std::string &name) const {
  size_t start = 0;
  while (start <= options_.dumpPattern.size()) {
    size_t end = options_.dumpPattern.find(',', start);
    if (end == std::string::npos) {
      end = options_.dumpPattern.size();
    }
    const std::string glob = options_.dumpPattern.substr(start, end - start);
    if (!glob.empty() && fnmatch(glob.c_str(), name.c_str(), 0) == 0) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

uint8_t *CpuEngine::address(const plan::Slice &slice) {
  return reinterpret_cast<uint8_t *>(arenas_[slice.arena()].data()) + slice.offset();
}

Expected<std::vector<float>> CpuEngine::run(const plan::Program &program,
                                            std::span<const int32_t> tokens,
                                            const std::vector<RowGroup> &groups, LogitsBack back) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  for (const plan::IoSlot *io : *program.io()) {
    if (io->kind() == plan::IoKind::SamplingParams) {
      // Programs share the io arena, so every slot is rewritten before each run: temperature
      // 0 (greedy) until the server passes sampling parameters.
      std::memset(address(*io->tensor()->slice()), 0, io->tensor()->slice()->size());
    }
    if (io->kind() == plan::IoKind::TokenIds) {
      std::memcpy(address(*io->tensor()->slice()), tokens.data(), tokens.size() * 4);
    }
  }
  // Pages for the rows this run appends, and the step context the plan's io slots describe.
  for (const RowGroup &g : groups) {
    GLM_RETURN_IF_ERROR(sequences_.reserve(g.slot, sequences_.length(g.slot) + g.count));
  }
  for (const plan::IoSlot *io : *program.io()) {
    auto *words = reinterpret_cast<int32_t *>(address(*io->tensor()->slice()));
    if (io->kind() == plan::IoKind::Positions) {
      for (const RowGroup &g : groups) {
        for (int64_t r = 0; r < g.count; ++r) {
          words[g.first + r] = static_cast<int32_t>(sequences_.length(g.slot) + r);
        }
      }
    } else if (io->kind() == plan::IoKind::SequenceSlots) {
      for (size_t b = 0; b < groups.size(); ++b) {
        words[b] = groups[b].slot;
      }
    } else if (io->kind() == plan::IoKind::PageTable) {
      const int64_t perSequence = tensorDim(*io->tensor(), 1);
      std::fill(words, words + groups.size() * perSequence, -1);
      for (size_t b = 0; b < groups.size(); ++b) {
        const std::vector<int32_t> &pages = sequences_.pages(groups[b].slot);
        std::copy(pages.begin(), pages.end(), words + b * perSequence);
      }
    }
  }
  std::vector<TensorSpec> dumps;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> dumpBytes;
  for (const plan::Step *step : *program.steps()) {
    GLM_RETURN_IF_ERROR(
        runStep(*step, rows, groups).withContext(strCat("step ", step->name()->str())));
    if (!options_.dumpPattern.empty() && matchesDump(step->name()->str())) {
      // The rows this run used, under the output's IR name.
      for (const plan::TensorRef *t : *step->results()) {
        std::vector<int64_t> shape(t->shape()->begin(), t->shape()->end());
        uint64_t rowBytes = elementSize(t->element());
        for (size_t d = 1; d < shape.size(); ++d) {
          rowBytes *= static_cast<uint64_t>(shape[d]);
        }
        shape[0] = rows;
        const uint8_t *src = address(*t->slice());
        auto bytes = std::make_shared<std::vector<uint8_t>>(src, src + rows * rowBytes);
        dumpBytes.push_back(bytes);
        dumps.push_back({t->name()->str(),
                         t->element() == plan::ElementType::I32 ? DType::I32 : DType::F32, shape,
                         [bytes](std::span<uint8_t> out) {
                           std::memcpy(out.data(), bytes->data(), out.size());
                         }});
      }
    }
  }
  if (!dumps.empty()) {
    const std::filesystem::path file = std::filesystem::path(options_.dumpDir) /
                                       strCat(runs_, ".", program.name()->str(), ".safetensors");
    GLM_RETURN_IF_ERROR(writeSafeTensors(file, dumps));
  }
  ++runs_;
  for (const RowGroup &g : groups) {
    sequences_.advance(g.slot, g.count);
  }
  for (const plan::IoSlot *io : *program.io()) {
    if (io->kind() == plan::IoKind::Logits) {
      const float *logits = floats(*io->tensor());
      std::vector<float> out;
      for (const RowGroup &g : groups) {
        const int64_t from = back == LogitsBack::All ? g.first : g.first + g.count - 1;
        const int64_t to = back == LogitsBack::None ? from : g.first + g.count;
        out.insert(out.end(), logits + from * vocab_, logits + to * vocab_);
      }
      return out;
    }
  }
  return internalError("program ", program.name()->str(), " has no logits io slot");
}

Status CpuEngine::runStep(const plan::Step &step, int64_t n, const std::vector<RowGroup> &groups) {
  const auto &in = *step.operands();
  const auto &out = *step.results();
  auto weight = [&](uint32_t i) -> kernels::WeightView {
    kernels::WeightView v;
    if (step.weights() == nullptr || i >= step.weights()->size()) {
      return v;
    }
    const plan::WeightBinding *w = plan().weights()->Get(step.weights()->Get(i));
    v.data = address(*w->slice());
    v.dtype = dtypeOfElement(w->element()).value();
    v.rank = static_cast<int>(w->rank_shape()->size());
    for (int d = 0; d < v.rank && d < kernels::WeightView::kMaxRank; ++d) {
      v.shape[d] = w->rank_shape()->Get(static_cast<uint32_t>(d));
    }
    return v;
  };
  // Weight i's matrices when it is an EXL3 binding (kernels/exl3/exl3.h, arena layout in
  // runtime/weights/Exl3Tensors.h); empty otherwise.
  auto exl3 = [&](uint32_t i) -> Expected<std::vector<kernels::Exl3MatrixView>> {
    std::vector<kernels::Exl3MatrixView> matrices;
    if (step.weights() == nullptr || i >= step.weights()->size()) {
      return matrices;
    }
    const plan::WeightBinding *w = plan().weights()->Get(step.weights()->Get(i));
    if (w->format() != plan::WeightFormat::EXL3) {
      return matrices;
    }
    GLM_ASSIGN_OR_RETURN(Exl3ArenaLayout layout, exl3BindingLayout(*w));
    for (int64_t m = 0; m < layout.matrices; ++m) {
      matrices.push_back(kernels::Exl3MatrixView::inArena(address(*w->slice()), layout, m));
    }
    return matrices;
  };
  auto stateSlot = [&](uint32_t i, int slot) {
    const plan::StateLayout *s = plan().states()->Get(step.states()->Get(i));
    return reinterpret_cast<float *>(address(*s->slice()) + slot * s->unit_bytes());
  };
  const float eps = floatAttribute(step, "eps", 1e-5f);

  switch (step.op()) {
  case plan::OpKind::Embedding:
    return kernels::embeddingRef(
        {.tokenIds = reinterpret_cast<const int32_t *>(address(*in[0]->slice())),
         .table = weight(0),
         .out = floats(*out[0]),
         .tokens = n,
         .copies = 1});
  case plan::OpKind::ExpandStreams:
    return kernels::expandStreamsRef({.x = floats(*in[0]),
                                      .out = floats(*out[0]),
                                      .tokens = n,
                                      .streams = tensorDim(*out[0], 1),
                                      .hidden = tensorDim(*out[0], 2)});
  case plan::OpKind::StreamMean:
    return kernels::streamMeanRef({.streams = floats(*in[0]),
                                   .out = floats(*out[0]),
                                   .tokens = n,
                                   .hcMult = tensorDim(*in[0], 1),
                                   .hidden = tensorDim(*in[0], 2)});
  case plan::OpKind::RmsNorm: {
    const int64_t width = tensorDim(*in[0], 1);
    const int64_t group = intAttribute(step, "group", width);
    return kernels::rmsNormRef({.x = floats(*in[0]),
                                .weight = weight(0),
                                .out = floats(*out[0]),
                                .rows = n * (width / group),
                                .dim = group,
                                .eps = eps});
  }
  case plan::OpKind::LayerNorm:
    return kernels::layerNormRef({.x = floats(*in[0]),
                                  .weight = weight(0),
                                  .bias = weight(1),
                                  .out = floats(*out[0]),
                                  .rows = n,
                                  .dim = tensorDim(*in[0], 1),
                                  .eps = eps});
  case plan::OpKind::Linear: {
    GLM_ASSIGN_OR_RETURN(std::vector<kernels::Exl3MatrixView> quantized, exl3(0));
    if (!quantized.empty()) {
      if (quantized[0].in != tensorDim(*in[0], 1) || quantized[0].out != tensorDim(*out[0], 1)) {
        return invalidArgument("EXL3 weight [", quantized[0].out, ", ", quantized[0].in,
                               "] does not map ", tensorDim(*in[0], 1), " to ",
                               tensorDim(*out[0], 1), " features");
      }
      return kernels::exl3DenseLinearRef(floats(*in[0]), quantized[0], weight(1), floats(*out[0]),
                                         n);
    }
    return kernels::linearRef({.x = floats(*in[0]),
                               .weight = weight(0),
                               .bias = weight(1),
                               .y = floats(*out[0]),
                               .rows = n,
                               .inFeatures = tensorDim(*in[0], 1),
                               .outFeatures = tensorDim(*out[0], 1)});
  }
  case plan::OpKind::MhcPre:
    return kernels::mhcPreRef({.streams = floats(*in[0]),
                               .fn = weight(0),
                               .base = weight(1),
                               .scale = weight(2),
                               .post = floats(*out[1]),
                               .comb = floats(*out[2]),
                               .x = floats(*out[0]),
                               .tokens = n,
                               .hcMult = tensorDim(*in[0], 1),
                               .hidden = tensorDim(*in[0], 2),
                               .sinkhornIters = intAttribute(step, "sinkhorn_iters", 20),
                               .normEps = floatAttribute(step, "norm_eps", 1e-5f),
                               .hcEps = floatAttribute(step, "hc_eps", 1e-6f)});
  case plan::OpKind::MhcPost:
    return kernels::mhcPostRef({.y = floats(*in[0]),
                                .residual = floats(*in[3]),
                                .post = floats(*in[1]),
                                .comb = floats(*in[2]),
                                .out = floats(*out[0]),
                                .tokens = n,
                                .hcMult = tensorDim(*in[3], 1),
                                .hidden = tensorDim(*in[3], 2)});
  case plan::OpKind::ShortConv: {
    const int64_t channels = tensorDim(*in[0], 1);
    const kernels::WeightView w = weight(0);
    for (const RowGroup &g : groups) {
      GLM_RETURN_IF_ERROR(kernels::shortConvRef({.x = floats(*in[0]) + g.first * channels,
                                                 .weight = w,
                                                 .state = stateSlot(0, g.slot),
                                                 .out = floats(*out[0]) + g.first * channels,
                                                 .tokens = g.count,
                                                 .channels = channels,
                                                 .kernelSize = w.dim(2)}));
    }
    return Status::success();
  }
  case plan::OpKind::Kda: {
    const int64_t heads = intAttribute(step, "num_heads"), d = intAttribute(step, "head_dim");
    const int64_t width = heads * d;
    for (const RowGroup &g : groups) {
      GLM_RETURN_IF_ERROR(
          kernels::kdaRef({.q = floats(*in[0]) + g.first * width,
                           .k = floats(*in[1]) + g.first * width,
                           .v = floats(*in[2]) + g.first * width,
                           .f = floats(*in[3]) + g.first * width,
                           .b = floats(*in[4]) + g.first * heads,
                           .aLog = weight(0),
                           .dtBias = weight(1),
                           .state = stateSlot(0, g.slot),
                           .out = floats(*out[0]) + g.first * width,
                           .tokens = g.count,
                           .heads = heads,
                           .keyDim = d,
                           .valueDim = d,
                           .lowerBound = floatAttribute(step, "lower_bound", -5.0f)}));
    }
    return Status::success();
  }
  case plan::OpKind::GatedNorm: {
    const int64_t width = tensorDim(*in[0], 1), group = intAttribute(step, "group", width);
    return kernels::gatedRmsNormRef({.x = floats(*in[0]),
                                     .gate = floats(*in[1]),
                                     .weight = weight(0),
                                     .out = floats(*out[0]),
                                     .rows = n * (width / group),
                                     .dim = group,
                                     .eps = eps});
  }
  case plan::OpKind::DsaIndexer: {
    const int64_t heads = intAttribute(step, "num_heads"), d = intAttribute(step, "head_dim");
    const int64_t kpool = intAttribute(step, "kpool"), topk = intAttribute(step, "topk");
    const int64_t width = tensorDim(*out[0], 1);
    const int64_t pageTokens = sequences_.pageTokens();
    if (pageTokens % kpool != 0) {
      return invalidArgument("pages of ", pageTokens, " tokens do not hold whole pools of ", kpool);
    }
    const uint32_t stateIndex = step.states()->Get(0);
    const plan::StateLayout &keys = *plan().states()->Get(stateIndex);
    auto tail = tailOf_.find(stateIndex);
    if (tail == tailOf_.end()) {
      return internalError("indexer state ", keys.name()->str(), " has no tail slot");
    }
    const int64_t poolsPerPage = pageTokens / kpool;
    for (const RowGroup &g : groups) {
      // The reference kernel takes the sequence's keys contiguously: gather them from the pages
      // and the tail slot, run it, and write back what it appended.
      const int64_t before = sequences_.length(g.slot), after = before + g.count;
      const int64_t closed = before / kpool, closedAfter = after / kpool;
      std::vector<float> poolKeys(static_cast<size_t>(std::max<int64_t>(closedAfter, 1) * d));
      for (int64_t p = 0; p < closed; ++p) {
        std::memcpy(poolKeys.data() + p * d, pagedRow(keys, g.slot, p, poolsPerPage),
                    static_cast<size_t>(d) * 4);
      }
      auto *tailSlot =
          reinterpret_cast<float *>(address(*plan().states()->Get(tail->second)->slice()) +
                                    g.slot * plan().states()->Get(tail->second)->unit_bytes());
      std::vector<float> openKeys(static_cast<size_t>(kpool * d)),
          openGates(static_cast<size_t>(kpool * d));
      for (int64_t r = 0; r < before % kpool; ++r) {
        std::memcpy(openKeys.data() + r * d, tailSlot + r * 2 * d, static_cast<size_t>(d) * 4);
        std::memcpy(openGates.data() + r * d, tailSlot + r * 2 * d + d, static_cast<size_t>(d) * 4);
      }
      kernels::DsaIndexerCache cache{.poolKeys = poolKeys.data(),
                                     .maxPools = std::max<int64_t>(closedAfter, 1),
                                     .openKeys = openKeys.data(),
                                     .openGates = openGates.data(),
                                     .length = before};
      GLM_RETURN_IF_ERROR(kernels::dsaIndexerRef(
          {.q = floats(*in[0]) + g.first * heads * d,
           .k = floats(*in[1]) + g.first * d,
           .gate = floats(*in[2]) + g.first * d,
           .headWeights = floats(*in[3]) + g.first * heads,
           .ape = weight(0),
           .cache = &cache,
           .selected = reinterpret_cast<int32_t *>(address(*out[0]->slice())) + g.first * width,
           .tokens = g.count,
           .heads = heads,
           .headDim = d,
           .topk = topk,
           .kpool = kpool,
           .alwaysSelectTail = width == topk + kpool - 1,
           .tieRule = options_.tieRule}));
      for (int64_t p = closed; p < closedAfter; ++p) {
        std::memcpy(pagedRow(keys, g.slot, p, poolsPerPage), poolKeys.data() + p * d,
                    static_cast<size_t>(d) * 4);
      }
      for (int64_t r = 0; r < after % kpool; ++r) {
        std::memcpy(tailSlot + r * 2 * d, openKeys.data() + r * d, static_cast<size_t>(d) * 4);
        std::memcpy(tailSlot + r * 2 * d + d, openGates.data() + r * d, static_cast<size_t>(d) * 4);
      }
    }
    return Status::success();
  }
  case plan::OpKind::MlaSparseAttention: {
    const int64_t heads = intAttribute(step, "num_heads");
    const int64_t dqk = intAttribute(step, "qk_head_dim"), dv = intAttribute(step, "v_head_dim");
    const int64_t rank = tensorDim(*in[1], 1), width = tensorDim(*in[2], 1);
    const plan::StateLayout &latents = *plan().states()->Get(step.states()->Get(0));
    for (const RowGroup &g : groups) {
      // Gather the sequence's latent rows from its pages, attend, write the new rows back.
      const int64_t before = sequences_.length(g.slot), after = before + g.count;
      std::vector<float> rows(static_cast<size_t>(after * rank));
      for (int64_t j = 0; j < before; ++j) {
        std::memcpy(rows.data() + j * rank, pagedRow(latents, g.slot, j, sequences_.pageTokens()),
                    static_cast<size_t>(rank) * 4);
      }
      kernels::MlaLatentCache cache{.latents = rows.data(), .maxTokens = after, .length = before};
      GLM_RETURN_IF_ERROR(kernels::mlaSparseAttentionRef(
          {.q = floats(*in[0]) + g.first * heads * dqk,
           .latent = floats(*in[1]) + g.first * rank,
           .kvB = weight(0),
           .selected =
               reinterpret_cast<const int32_t *>(address(*in[2]->slice())) + g.first * width,
           .cache = &cache,
           .out = floats(*out[0]) + g.first * heads * dv,
           .tokens = g.count,
           .heads = heads,
           .qkHeadDim = dqk,
           .vHeadDim = dv,
           .kvLoraRank = rank,
           .selectedWidth = width,
           .scale = floatAttribute(step, "scale")}));
      for (int64_t j = before; j < after; ++j) {
        std::memcpy(pagedRow(latents, g.slot, j, sequences_.pageTokens()), rows.data() + j * rank,
                    static_cast<size_t>(rank) * 4);
      }
    }
    return Status::success();
  }
  case plan::OpKind::SwiGlu:
    return kernels::swigluActivationRef({.gate = floats(*in[0]),
                                         .up = floats(*in[1]),
                                         .out = floats(*out[0]),
                                         .count = n * tensorDim(*in[0], 1),
                                         .limit = floatAttribute(step, "limit", INFINITY)});
  case plan::OpKind::MoeRouter: {
    const kernels::WeightView w = weight(0);
    return kernels::moeRouterRef(
        {.x = floats(*in[0]),
         .weight = w,
         .correctionBias = weight(1),
         .expertIds = reinterpret_cast<int32_t *>(address(*out[0]->slice())),
         .expertWeights = floats(*out[1]),
         .tokens = n,
         .hidden = tensorDim(*in[0], 1),
         .experts = w.dim(0),
         .topK = intAttribute(step, "top_k"),
         .nGroup = intAttribute(step, "n_group", 1),
         .topkGroup = intAttribute(step, "topk_group", 1),
         .normTopkProb = intAttribute(step, "norm_topk_prob", 1) != 0,
         .routedScalingFactor = floatAttribute(step, "scaling", 1.0f),
         .tieRule = options_.tieRule});
  }
  case plan::OpKind::MoeExperts: {
    // Per-expert views into the stacked [E, I, H] / [E, H, I] weights.
    const kernels::WeightView gate = weight(0), up = weight(1), down = weight(2);
    const int64_t experts = gate.dim(0), inter = gate.dim(1), hidden = gate.dim(2);
    const int64_t topK = tensorDim(*in[1], 1);
    const auto *ids = reinterpret_cast<const int32_t *>(address(*in[1]->slice()));
    const float *routeWeights = floats(*in[2]);
    // With experts split over ranks, this rank owns ids [rank E_local, (rank + 1) E_local):
    // selections of other ranks' experts contribute an exact zero here (weight 0) and are summed
    // by the all-reduce that follows.
    std::vector<int32_t> localIds;
    std::vector<float> localWeights;
    if (intAttribute(step, "expert_shards", 1) > 1) {
      const int64_t first = rank_ * experts;
      localIds.resize(static_cast<size_t>(n * topK));
      localWeights.resize(localIds.size());
      for (size_t i = 0; i < localIds.size(); ++i) {
        const int64_t local = ids[i] - first;
        const bool mine = local >= 0 && local < experts;
        localIds[i] = mine ? static_cast<int32_t>(local) : 0;
        localWeights[i] = mine ? routeWeights[i] : 0.0f;
      }
      ids = localIds.data();
      routeWeights = localWeights.data();
    }
    const size_t matrix = static_cast<size_t>(inter * hidden) * dtypeSize(gate.dtype);
    std::vector<kernels::ExpertWeights> views(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
      auto view = [&](const kernels::WeightView &stacked, int64_t rows, int64_t cols) {
        kernels::WeightView v;
        v.data = static_cast<const uint8_t *>(stacked.data) + static_cast<size_t>(e) * matrix;
        v.dtype = stacked.dtype;
        v.rank = 2;
        v.shape[0] = rows;
        v.shape[1] = cols;
        return v;
      };
      views[e] = {view(gate, inter, hidden), view(up, inter, hidden), view(down, hidden, inter)};
    }
    const kernels::MoeExpertsArgs moe{.x = floats(*in[0]),
                                      .expertIds = ids,
                                      .expertWeights = routeWeights,
                                      .experts = views.data(),
                                      .out = floats(*out[0]),
                                      .tokens = n,
                                      .hidden = hidden,
                                      .numExperts = experts,
                                      .topK = topK,
                                      .intermediate = inter,
                                      .swigluLimit = floatAttribute(step, "limit", INFINITY)};
    // EXL3 projections replace the dense views above (which then point at trellis bytes).
    GLM_ASSIGN_OR_RETURN(std::vector<kernels::Exl3MatrixView> qGate, exl3(0));
    GLM_ASSIGN_OR_RETURN(std::vector<kernels::Exl3MatrixView> qUp, exl3(1));
    GLM_ASSIGN_OR_RETURN(std::vector<kernels::Exl3MatrixView> qDown, exl3(2));
    if (qGate.empty() && qUp.empty() && qDown.empty()) {
      return kernels::moeExpertsRef(moe);
    }
    return kernels::exl3MoeExpertsRef({.moe = moe,
                                       .exl3Gate = qGate.empty() ? nullptr : qGate.data(),
                                       .exl3Up = qUp.empty() ? nullptr : qUp.data(),
                                       .exl3Down = qDown.empty() ? nullptr : qDown.data()});
  }
  case plan::OpKind::Convert:
    // Only bf16 plans widen logits, and the CPU runs f32 plans, where a convert is a copy.
    if (in[0]->element() != plan::ElementType::F32) {
      return invalidArgument("the CPU backend converts only f32 buffers");
    }
    std::memcpy(floats(*out[0]), floats(*in[0]),
                static_cast<size_t>(n * tensorDim(*in[0], 1)) * sizeof(float));
    return Status::success();
  case plan::OpKind::Add:
    return kernels::addRef({.a = floats(*in[0]),
                            .b = floats(*in[1]),
                            .out = floats(*out[0]),
                            .count = n * (in[0]->shape()->size() > 1 ? tensorDim(*in[0], 1) : 1)});
  case plan::OpKind::Concat: {
    std::vector<const float *> inputs;
    std::vector<int64_t> widths;
    for (const plan::TensorRef *t : in) {
      inputs.push_back(floats(*t));
      widths.push_back(tensorDim(*t, 1));
    }
    return kernels::concatRef(
        {.inputs = inputs, .widths = widths, .out = floats(*out[0]), .rows = n});
  }
  case plan::OpKind::Sample: {
    // Greedy when the op says so or the sequence's temperature (word 0 of its sampling
    // parameters, which the host zeroes by default) is 0.
    const int64_t vocab = tensorDim(*in[0], 1);
    const auto *params = reinterpret_cast<const float *>(address(*in[2]->slice()));
    for (size_t b = 0; b < groups.size(); ++b) {
      if (stepAttribute(step, "greedy") == nullptr && params[b * 8] != 0.0f) {
        return unimplemented("sampling at a temperature comes with the on-device sampler");
      }
      const RowGroup &g = groups[b];
      GLM_RETURN_IF_ERROR(kernels::argmaxRef(
          {.logits = floats(*in[0]) + g.first * vocab,
           .out = reinterpret_cast<int32_t *>(address(*out[0]->slice())) + g.first,
           .rows = g.count,
           .vocab = vocab}));
    }
    return Status::success();
  }
  case plan::OpKind::AllReduce: {
    if (options_.comm == nullptr) {
      return internalError("a collective in a plan without a communicator");
    }
    GLM_ASSIGN_OR_RETURN(CollectiveShape shape, collectiveShape(step, options_.comm->world()));
    // Only the rows this run uses.
    const uint64_t count = static_cast<uint64_t>(n * shape.width);
    std::memcpy(floats(*out[0]), floats(*in[0]), count * sizeof(float));
    return options_.comm->allReduce(floats(*out[0]), count);
  }
  case plan::OpKind::AllGather: {
    if (options_.comm == nullptr) {
      return internalError("a collective in a plan without a communicator");
    }
    GLM_ASSIGN_OR_RETURN(CollectiveShape shape, collectiveShape(step, options_.comm->world()));
    return options_.comm->allGather(floats(*in[0]), floats(*out[0]), static_cast<size_t>(n),
                                    static_cast<size_t>(shape.width), shape.axis);
  }
  }
  return unimplemented("op ", plan::EnumNameOpKind(step.op()));
}

} // namespace glm::runtime
