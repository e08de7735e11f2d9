// Step-by-step plan execution on the CPU with the reference kernels.
#include "runtime/engine/CpuEngine.h"

#include "kernels/OpTable.h"
#include "runtime/engine/PlanContracts.h"
#include "runtime/engine/PlanStep.h"
#include "runtime/plan/Collectives.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensorsWriter.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fnmatch.h>
#include <functional>

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
  // Every step against its op's contract, before any weight is read.
  GLM_RETURN_IF_ERROR(validatePlanSteps(*planFile));
  std::unique_ptr<CpuEngine> engine(new CpuEngine());
  engine->options_ = options;
  engine->rank_ = options.comm != nullptr ? options.comm->rank() : 0;
  for (const plan::Arena *a : *p.arenas()) {
    engine->arenas_.emplace_back((a->size() + 7) / 8, 0);
  }
  for (uint32_t i = 0; i < p.arenas()->size(); ++i) {
    if (p.arenas()->Get(i)->kind() == plan::ArenaKind::Weights) {
      auto *weights = reinterpret_cast<uint8_t *>(engine->arenas_[i].data());
      RankWeightLoad load(p, checkpoint, static_cast<uint32_t>(engine->rank_), options.weights);
      GLM_RETURN_IF_ERROR(load.window(0, {weights, engine->arenas_[i].size() * 8}));
      GLM_RETURN_IF_ERROR(load.finish());
    }
  }
  GLM_RETURN_IF_ERROR(engine->initCommon(p, planFile->source()));
  if (p.states() != nullptr) {
    for (const plan::StateLayout *s : *p.states()) {
      if (s->paged() && s->element() != plan::ElementType::F32) {
        return invalidArgument(planFile->source(), ": state ", s->name()->str(), " is not f32");
      }
    }
  }
  // The reference kernels address an EXL3 binding by its layout: one that is none is refused here.
  if (p.weights() != nullptr) {
    for (const plan::WeightBinding *w : *p.weights()) {
      if (w->format() == plan::WeightFormat::EXL3) {
        GLM_RETURN_IF_ERROR(exl3BindingLayout(*w).status().withContext(planFile->source()));
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

Status CpuEngine::copyState(int from, int to) {
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      uint8_t *base = address(*s->slice());
      std::memcpy(base + to * s->unit_bytes(), base + from * s->unit_bytes(), s->unit_bytes());
    }
  }
  // A page holds every paged state's rows of its tokens: whole pages copy them all.
  if (const plan::StatePool *pool = plan().state_pool()) {
    uint8_t *base = address(*pool->slice());
    const std::vector<int32_t> &source = sequences_.pages(from), &target = sequences_.pages(to);
    for (size_t j = 0; j < source.size() && j < target.size(); ++j) {
      std::memcpy(base + target[j] * pool->page_bytes(), base + source[j] * pool->page_bytes(),
                  pool->page_bytes());
    }
  }
  return Status::success();
}

void CpuEngine::slotsOut(int slot, std::vector<uint8_t> &copy, bool asPrompt) {
  copy.assign(static_cast<size_t>(keptStateBytes()), 0);
  size_t at = 0;
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      std::memcpy(copy.data() + at, address(*s->slice()) + slot * s->unit_bytes(), s->unit_bytes());
      if (asPrompt && s->kind() == plan::StateKind::TokenCounts) {
        countsAsPrompt({reinterpret_cast<uint32_t *>(copy.data() + at), s->unit_bytes() / 4});
      }
      at += s->unit_bytes();
    }
  }
}

void CpuEngine::slotsIn(const std::vector<uint8_t> &copy, int slot) {
  size_t at = 0;
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      std::memcpy(address(*s->slice()) + slot * s->unit_bytes(), copy.data() + at, s->unit_bytes());
      at += s->unit_bytes();
    }
  }
}

Status CpuEngine::saveKept(int slot, int kept) {
  if (kept_.size() <= static_cast<size_t>(kept)) {
    kept_.resize(static_cast<size_t>(kept) + 1);
  }
  slotsOut(slot, kept_[static_cast<size_t>(kept)], /*asPrompt=*/true);
  return Status::success();
}

Status CpuEngine::loadKept(int kept, int slot) {
  slotsIn(kept_[static_cast<size_t>(kept)], slot);
  return Status::success();
}

Status CpuEngine::checkpointSlots(int slot) {
  if (checkpoints_.size() <= static_cast<size_t>(slot)) {
    checkpoints_.resize(static_cast<size_t>(slot) + 1);
  }
  slotsOut(slot, checkpoints_[static_cast<size_t>(slot)], /*asPrompt=*/false);
  return Status::success();
}

Status CpuEngine::restoreSlots(int slot) {
  if (checkpoints_.size() <= static_cast<size_t>(slot) ||
      checkpoints_[static_cast<size_t>(slot)].empty()) {
    return internalError("sequence slot ", slot, " has no checkpoint to restore");
  }
  slotsIn(checkpoints_[static_cast<size_t>(slot)], slot);
  return Status::success();
}

void CpuEngine::freeKept(int kept) {
  if (static_cast<size_t>(kept) < kept_.size()) {
    kept_[static_cast<size_t>(kept)] = {};
  }
}

Status CpuEngine::copyPage(int32_t from, int32_t to) {
  const plan::StatePool *pool = plan().state_pool();
  uint8_t *base = address(*pool->slice());
  std::memcpy(base + to * pool->page_bytes(), base + from * pool->page_bytes(), pool->page_bytes());
  return Status::success();
}

Expected<CpuEngine::RunOutput> CpuEngine::run(const plan::Program &program,
                                              std::span<const int32_t> tokens,
                                              const std::vector<RowGroup> &groups, LogitsBack back,
                                              RunSampling sampling) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  // Programs share the io arena, so every slot is rewritten before each run (the bias and mask
  // ones when some sequence has them: the sampler reads them only then).
  const SamplingWords words = samplingWords(sampling.rows, program.batch(), sampling.following);
  for (const plan::IoSlot *io : *program.io()) {
    uint8_t *at = address(*io->tensor()->slice());
    const size_t bytes = io->tensor()->slice()->size();
    auto write = [&](const void *data, size_t size) {
      if (size > 0) {
        std::memcpy(at, data, std::min(bytes, size));
      }
    };
    switch (io->kind()) {
    case plan::IoKind::TokenIds:
      write(tokens.data(), tokens.size() * 4);
      break;
    case plan::IoKind::SamplingParams:
      write(words.params.data(), words.params.size() * sizeof(kernels::SampleWords));
      break;
    case plan::IoKind::LogitBias:
      write(words.bias.data(), words.bias.size() * 4);
      break;
    case plan::IoKind::TokenMask:
      write(words.mask.data(), words.mask.size() * 4);
      break;
    default:
      break;
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
      const int64_t perSequence = io->tensor()->shape()->Get(1);
      std::fill(words, words + groups.size() * perSequence, -1);
      for (size_t b = 0; b < groups.size(); ++b) {
        const std::vector<int32_t> &pages = sequences_.pages(groups[b].slot);
        if (static_cast<int64_t>(pages.size()) > perSequence) {
          return invalidArgument("sequence ", groups[b].slot, " holds ", pages.size(),
                                 " pages; the page table has ", perSequence);
        }
        std::copy(pages.begin(), pages.end(), words + b * perSequence);
      }
    }
  }
  std::vector<TensorSpec> dumps;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> dumpBytes;
  // After a last_rows step the head runs one row per sequence: row b is group b's.
  std::vector<RowGroup> lastRows;
  for (size_t b = 0; b < groups.size(); ++b) {
    lastRows.push_back({groups[b].slot, static_cast<int64_t>(b), 1});
  }
  for (const plan::Step *step : *program.steps()) {
    const bool perSequence = onePerSequence(plan(), program, *step);
    const int64_t stepRows = perSequence ? static_cast<int64_t>(groups.size()) : rows;
    GLM_RETURN_IF_ERROR(runStep(program, *step, stepRows, perSequence ? lastRows : groups)
                            .withContext(strCat("step ", step->name()->str())));
    if (!options_.dumpPattern.empty()) {
      // The rows this run used, under the output's IR name: every result of a step whose name
      // matches, and each result whose own name does (a fused step's results keep their ops'
      // names: blk.0.ffn_hc.post is a result of blk.0.ffn_hc.post+1.attn_hc).
      const bool wholeStep = matchesDump(step->name()->str());
      for (const plan::TensorRef *t : *step->results()) {
        if (!wholeStep && !matchesDump(t->name()->str())) {
          continue;
        }
        std::vector<int64_t> shape(t->shape()->begin(), t->shape()->end());
        uint64_t rowBytes = elementSize(t->element());
        for (size_t d = 1; d < shape.size(); ++d) {
          rowBytes *= static_cast<uint64_t>(shape[d]);
        }
        // One row per sequence after a last_rows step, else the run's rows.
        shape[0] = program.rows() > 1 && shape[0] == static_cast<int64_t>(program.batch())
                       ? static_cast<int64_t>(groups.size())
                       : rows;
        const uint8_t *src = address(*t->slice());
        auto bytes = std::make_shared<std::vector<uint8_t>>(src, src + shape[0] * rowBytes);
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
  RunOutput out;
  const int32_t *sampledIds = nullptr;
  const float *sampledLogprobs = nullptr;
  const int32_t *draftIds = nullptr;
  for (const plan::IoSlot *io : *program.io()) {
    if (io->kind() == plan::IoKind::SampledIds) {
      sampledIds = reinterpret_cast<const int32_t *>(address(*io->tensor()->slice()));
    } else if (io->kind() == plan::IoKind::DraftIds) {
      draftIds = reinterpret_cast<const int32_t *>(address(*io->tensor()->slice()));
    } else if (io->kind() == plan::IoKind::SampledLogprobs) {
      sampledLogprobs = floats(*io->tensor());
    } else if (io->kind() == plan::IoKind::Logits && back != LogitsBack::None) {
      const float *logits = floats(*io->tensor());
      for (size_t b = 0; b < groups.size(); ++b) {
        const RowGroup &g = groups[b];
        if (program.last_row_logits()) {
          // Row b is group b's last row, the only one the program computed.
          if (back == LogitsBack::All && g.count > 1) {
            return internalError("program ", program.name()->str(),
                                 " computes each sequence's last row's logits only");
          }
          out.logits.insert(out.logits.end(), logits + b * vocab_, logits + (b + 1) * vocab_);
          continue;
        }
        const int64_t from = back == LogitsBack::All ? g.first : g.first + g.count - 1;
        out.logits.insert(out.logits.end(), logits + from * vocab_,
                          logits + (g.first + g.count) * vocab_);
      }
    }
  }
  if (sampling.readBack) {
    if (sampledIds == nullptr || sampledLogprobs == nullptr) {
      return internalError("program ", program.name()->str(), " has no sampled io slots");
    }
    if (sampling.everyRow && program.last_row_logits()) {
      return internalError("program ", program.name()->str(),
                           " draws after each sequence's last row only");
    }
    constexpr int64_t kOut = 1 + kernels::kSampleTopLogprobs;
    for (size_t b = 0; b < groups.size(); ++b) {
      // A last-row program's row b is group b's last; otherwise the rows are packed by group.
      const int64_t last = program.last_row_logits() ? static_cast<int64_t>(b)
                                                     : groups[b].first + groups[b].count - 1;
      const int64_t first = sampling.everyRow ? groups[b].first : last;
      for (int64_t row = first; row <= last; ++row) {
        out.sampled.push_back(sampledToken(sampledIds + row * kOut, sampledLogprobs + row * kOut,
                                           draftIds != nullptr ? draftIds + row * kOut : nullptr,
                                           b < sampling.rows.size() ? &sampling.rows[b] : nullptr));
      }
    }
  }
  return out;
}

namespace {

/// The CPU engine's memory for one step, as the op adapters read it.
class HostMemory final : public kernels::HostStep {
public:
  HostMemory(const PlanStep &step, int64_t rows, std::vector<kernels::HostRowGroup> groups,
             std::function<uint8_t *(const plan::Slice &)> address, const SequenceTable &sequences,
             int rank, kernels::TopkTieRule tieRule)
      : step_(step), rows_(rows), groups_(std::move(groups)), address_(std::move(address)),
        sequences_(sequences), rank_(rank), tieRule_(tieRule) {}

  int64_t rows() const override { return rows_; }
  std::span<const kernels::HostRowGroup> groups() const override { return groups_; }
  void *operand(size_t i) const override { return address_(*step_.operandRef(i).slice()); }
  void *result(size_t i) const override { return address_(*step_.resultRef(i).slice()); }
  kernels::WeightView weight(size_t i) const override {
    kernels::WeightView v;
    if (!step_.hasWeight(i)) {
      return v;
    }
    const kernels::WeightInfo w = step_.weight(i);
    if (w.encoding != kernels::DenseEncoding::Plain && w.shape.rank == 2) {
      return kernels::WeightView::encoded(weightBytes(i), w.encoding, w.element, w.shape[0],
                                          w.shape[1]);
    }
    v.data = weightBytes(i);
    v.dtype = w.element;
    v.rank = std::min(w.shape.rank, kernels::WeightView::kMaxRank);
    for (int d = 0; d < v.rank; ++d) {
      v.shape[d] = w.shape[d];
    }
    return v;
  }
  const uint8_t *weightBytes(size_t i) const override {
    return address_(*step_.binding(i).slice());
  }
  uint8_t *stateBytes(size_t i) const override { return address_(*step_.layout(i).slice()); }
  std::span<const int32_t> pages(int slot) const override { return sequences_.pages(slot); }
  int rank() const override { return rank_; }
  kernels::TopkTieRule tieRule() const override { return tieRule_; }

private:
  const PlanStep &step_;
  int64_t rows_;
  std::vector<kernels::HostRowGroup> groups_;
  std::function<uint8_t *(const plan::Slice &)> address_;
  const SequenceTable &sequences_;
  int rank_;
  kernels::TopkTieRule tieRule_;
};

} // namespace

bool CpuEngine::onePerSequence(const plan::Plan &plan, const plan::Program &program,
                               const plan::Step &step) {
  return program.rows() > 1 && PlanStep(plan, program, step).rowsPerSequence() == 1;
}

Status CpuEngine::runStep(const plan::Program &program, const plan::Step &step, int64_t n,
                          const std::vector<RowGroup> &groups) {
  if (step.collective() != nullptr) {
    return runCollective(step, n);
  }
  const PlanStep view(plan(), program, step);
  const kernels::OpAdapters *op = kernels::findOp(step.op()->string_view());
  if (op == nullptr) {
    return unimplemented("op ", step.op()->str(), " has no CPU reference");
  }
  GLM_RETURN_IF_ERROR(kernels::checkWeightFormats(*op, view, /*gpu=*/false));
  std::vector<kernels::HostRowGroup> rows;
  for (const RowGroup &g : groups) {
    rows.push_back({g.slot, g.first, g.count, sequences_.length(g.slot)});
  }
  const HostMemory host(
      view, n, std::move(rows), [this](const plan::Slice &s) { return address(s); }, sequences_,
      rank_, options_.tieRule);
  return op->cpu(view, host);
}

Status CpuEngine::runCollective(const plan::Step &step, int64_t n) {
  if (options_.comm == nullptr) {
    return internalError("a collective in a plan without a communicator");
  }
  GLM_ASSIGN_OR_RETURN(CollectiveShape shape, collectiveShape(step, options_.comm->world()));
  float *in = floats(*step.operands()->Get(0)), *out = floats(*step.results()->Get(0));
  if (shape.kind == plan::CollectiveKind::AllReduce) {
    // Only the rows this run uses.
    const uint64_t count = static_cast<uint64_t>(n * shape.width);
    std::memcpy(out, in, count * sizeof(float));
    return options_.comm->allReduce(out, count);
  }
  return options_.comm->allGather(in, out, static_cast<size_t>(n), static_cast<size_t>(shape.width),
                                  shape.axis);
}

} // namespace glm::runtime
