// Plan loading and semantic validation.
#include "runtime/plan/PlanFile.h"

#include "kernels/common/DenseFormats.h"
#include "kernels/sample/sample_params.h"
#include "runtime/schema/PlanHash.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

namespace glm::runtime {

size_t elementSize(plan::ElementType type) {
  switch (type) {
  case plan::ElementType::F32:
  case plan::ElementType::I32:
    return 4;
  case plan::ElementType::BF16:
  case plan::ElementType::F16:
  case plan::ElementType::I16:
    return 2;
  case plan::ElementType::F8E4M3:
  case plan::ElementType::U8:
    return 1;
  case plan::ElementType::I64:
    return 8;
  }
  return 0;
}

namespace {

/// Largest plan accepted: far above any real plan (cubins for every kernel are a few MB), small
/// enough that a lying file cannot make us allocate without bound.
constexpr uint64_t kMaxPlanBytes = 4ull << 30;
/// Dimensions of a tensor, weight or state unit at most: what kernels' shapes hold
/// (kernels/common/OpStep.h).
constexpr size_t kMaxRank = 4;
/// The least arena alignment: the widest load a kernel makes.
constexpr uint32_t kMinAlignment = 16;

/// The bytes of each arena a program has written so far, as merged [begin, end) ranges: a step
/// may read only what an io slot the host fills or an earlier step wrote (else it reads whatever
/// another program left there, or nothing ever written).
class WrittenBytes {
public:
  void add(const plan::Slice &s, uint64_t bytes) {
    auto &ranges = arenas_[s.arena()];
    uint64_t begin = s.offset(), end = s.offset() + bytes;
    // Merge with every range it touches, then keep the list sorted.
    std::vector<std::pair<uint64_t, uint64_t>> kept;
    for (const auto &[b, e] : ranges) {
      if (e < begin || b > end) {
        kept.push_back({b, e});
      } else {
        begin = std::min(begin, b);
        end = std::max(end, e);
      }
    }
    kept.push_back({begin, end});
    std::sort(kept.begin(), kept.end());
    ranges = std::move(kept);
  }
  bool covers(const plan::Slice &s, uint64_t bytes) const {
    auto it = arenas_.find(s.arena());
    if (it == arenas_.end()) {
      return bytes == 0;
    }
    for (const auto &[b, e] : it->second) {
      if (b <= s.offset() && s.offset() + bytes <= e) {
        return true;
      }
    }
    return bytes == 0;
  }

private:
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> arenas_;
};

/// Validates one plan, remembering where it is for messages ("program decode_b1_r1, step 12
/// (blk.3.attn.q_proj)").
class Validator {
public:
  Validator(const plan::Plan &plan, const std::string &source) : plan_(plan), source_(source) {}

  Status run() {
    if (plan_.format_version() != kPlanFormatVersion) {
      return fail("", "format version ", plan_.format_version(), ", this glmc reads version ",
                  kPlanFormatVersion, " (recompile the plan)");
    }
    if (plan_.target() == nullptr || plan_.target()->name() == nullptr) {
      return fail("", "no target description");
    }
    if (plan_.tp() < 1) {
      return fail("", "tensor-parallel size ", plan_.tp(), " (must be at least 1)");
    }
    GLM_RETURN_IF_ERROR(checkArenas());
    GLM_RETURN_IF_ERROR(checkWeights());
    GLM_RETURN_IF_ERROR(checkStates());
    GLM_RETURN_IF_ERROR(checkKernels());
    GLM_RETURN_IF_ERROR(checkPrograms());
    return Status::success();
  }

private:
  template <typename... Args> Status fail(const std::string &where, Args &&...args) {
    return formatError(source_, ": ", where.empty() ? "" : where + ": ",
                       std::forward<Args>(args)...);
  }

  static std::string name(const flatbuffers::String *s) { return s ? s->str() : "(unnamed)"; }

  /// The engines name programs, steps, tensors, weights and states in their messages and dumps:
  /// each must have a name (the verifier lets any string be absent).
  Status checkNamed(const std::string &where, const flatbuffers::String *s) {
    return s == nullptr || s->size() == 0 ? fail(where, "has no name") : Status::success();
  }

  /// The verifier checks a vector's 4-byte length word only: a [long] whose elements start at 4
  /// mod 8 would be read by misaligned 8-byte loads (undefined behaviour). The buffer is 8-byte
  /// aligned (PlanFile's storage), so the elements' addresses are what must be.
  Status checkAligned(const std::string &where, const char *field,
                      const flatbuffers::Vector<int64_t> *v) {
    if (v != nullptr && reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) != 0) {
      return fail(where, field, " is not 8-byte aligned (a damaged or hand-made plan)");
    }
    return Status::success();
  }

  Status checkArenas() {
    if (plan_.arenas() == nullptr || plan_.arenas()->size() == 0) {
      return fail("", "no arenas");
    }
    for (uint32_t i = 0; i < plan_.arenas()->size(); ++i) {
      const plan::Arena *arena = plan_.arenas()->Get(i);
      const uint32_t a = arena->alignment();
      // Kernels load 16 bytes at a time, and every slice starts at its arena's alignment.
      if (a < kMinAlignment || (a & (a - 1)) != 0) {
        return fail("arena " + name(arena->name()), "alignment ", a,
                    " is not a power of two of at least ", kMinAlignment);
      }
      if (arena->kind() == plan::ArenaKind::Workspace) {
        if (workspaceArena_ >= 0) {
          return fail("arena " + name(arena->name()), "is a second workspace");
        }
        workspaceArena_ = static_cast<int64_t>(i);
      }
    }
    return Status::success();
  }

  Status checkSlice(const std::string &where, const plan::Slice *slice) {
    if (slice == nullptr) {
      return fail(where, "has no slice");
    }
    const auto *arenas = plan_.arenas();
    if (slice->arena() >= arenas->size()) {
      return fail(where, "names arena ", slice->arena(), " of ", arenas->size());
    }
    const uint64_t size = arenas->Get(slice->arena())->size();
    // offset + size <= arena size, written so it cannot overflow.
    if (slice->offset() > size || slice->size() > size - slice->offset()) {
      return fail(where, "slice [", slice->offset(), ", +", slice->size(), ") overruns arena ",
                  name(arenas->Get(slice->arena())->name()), " of ", size, " bytes");
    }
    const uint32_t alignment = arenas->Get(slice->arena())->alignment();
    if (slice->offset() % alignment != 0) {
      return fail(where, "slice at byte ", slice->offset(), " of arena ",
                  name(arenas->Get(slice->arena())->name()), " is not aligned to its ", alignment,
                  " bytes");
    }
    return Status::success();
  }

  /// The byte size of a dense tensor, or an error on a negative dimension or overflow.
  Expected<uint64_t> denseBytes(const std::string &where, const flatbuffers::Vector<int64_t> *shape,
                                plan::ElementType element) {
    if (shape == nullptr) {
      return fail(where, "has no shape");
    }
    const size_t width = elementSize(element);
    if (width == 0) {
      return fail(where, "has unknown element type ", static_cast<int>(element));
    }
    if (shape->size() > kMaxRank) {
      return fail(where, "has ", shape->size(), " dimensions (at most ", kMaxRank, ")");
    }
    uint64_t bytes = width;
    for (int64_t d : *shape) {
      if (d < 0) {
        return fail(where, "has negative dimension ", d);
      }
      if (d != 0 && bytes > UINT64_MAX / static_cast<uint64_t>(d)) {
        return fail(where, "shape overflows 64 bits");
      }
      bytes *= static_cast<uint64_t>(d);
    }
    return bytes;
  }

  Status checkTensor(const std::string &where, const plan::TensorRef *t) {
    if (t == nullptr) {
      return fail(where, "has a null tensor");
    }
    const std::string here = where + " tensor " + name(t->name());
    GLM_RETURN_IF_ERROR(checkNamed(here, t->name()));
    GLM_RETURN_IF_ERROR(checkAligned(here, "its shape", t->shape()));
    GLM_RETURN_IF_ERROR(checkSlice(here, t->slice()));
    GLM_ASSIGN_OR_RETURN(uint64_t bytes, denseBytes(here, t->shape(), t->element()));
    if (bytes > t->slice()->size()) {
      return fail(here, "needs ", bytes, " bytes but its slice holds ", t->slice()->size());
    }
    return Status::success();
  }

  Status checkWeights() {
    if (plan_.weights() == nullptr) {
      return Status::success();
    }
    for (const plan::WeightBinding *w : *plan_.weights()) {
      const std::string where = "weight " + name(w->name());
      GLM_RETURN_IF_ERROR(checkNamed(where, w->name()));
      GLM_RETURN_IF_ERROR(checkAligned(where, "its global shape", w->global_shape()));
      GLM_RETURN_IF_ERROR(checkAligned(where, "its rank shape", w->rank_shape()));
      if (w->checkpoint() == nullptr || w->checkpoint()->size() == 0) {
        return fail(where, "names no checkpoint tensor");
      }
      GLM_RETURN_IF_ERROR(checkSlice(where, w->slice()));
      if (w->global_shape() == nullptr || w->rank_shape() == nullptr ||
          w->global_shape()->size() != w->rank_shape()->size()) {
        return fail(where, "global and rank shapes must have one rank");
      }
      if (w->shard() != plan::ShardKind::Replicated && w->shard_dim() >= w->rank_shape()->size()) {
        return fail(where, "shard dimension ", w->shard_dim(), " is outside its rank");
      }
      // EXL3 slices hold the trellis, Q4 and fp8 slices their encoding (DenseFormats.h);
      // everything else is dense.
      if (w->encoding() != plan::DenseEncoding::Plain) {
        GLM_RETURN_IF_ERROR(checkEncoded(where, *w));
      } else if (w->format() != plan::WeightFormat::EXL3) {
        if (w->element() == plan::ElementType::F8E4M3 || w->element() == plan::ElementType::U8) {
          return fail(where, "holds ", plan::EnumNameElementType(w->element()),
                      " elements without their scales (an fp8 or q4 encoding)");
        }
        GLM_ASSIGN_OR_RETURN(uint64_t bytes, denseBytes(where, w->rank_shape(), w->element()));
        if (bytes > w->slice()->size()) {
          return fail(where, "needs ", bytes, " bytes but its slice holds ", w->slice()->size());
        }
      }
    }
    return Status::success();
  }

  /// A Q4 or fp8 slice: its element type, whole groups, and room for every matrix's codes and
  /// scales.
  Status checkEncoded(const std::string &where, const plan::WeightBinding &w) {
    const bool q4 = w.encoding() == plan::DenseEncoding::Q4;
    if (w.encoding() != plan::DenseEncoding::Q4 && w.encoding() != plan::DenseEncoding::Fp8) {
      return fail(where, "has an unknown dense encoding");
    }
    if (w.format() == plan::WeightFormat::EXL3) {
      return fail(where, "is EXL3 and cannot also be ", q4 ? "Q4" : "fp8");
    }
    if (w.element() != (q4 ? plan::ElementType::U8 : plan::ElementType::F8E4M3)) {
      return fail(where, "is ", q4 ? "Q4 with " : "fp8 with ",
                  plan::EnumNameElementType(w.element()), " elements");
    }
    const auto &shape = *w.rank_shape();
    if (shape.size() < 2) {
      return fail(where, "is ", q4 ? "Q4" : "fp8", " but not a matrix");
    }
    uint64_t matrices = 1;
    for (size_t d = 0; d + 2 < shape.size(); ++d) {
      if (shape[d] <= 0) {
        return fail(where, "has a dimension of ", shape[d]);
      }
      matrices *= static_cast<uint64_t>(shape[d]);
    }
    const int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
    // At most 2^48 elements in all, so the byte counts below cannot overflow.
    constexpr uint64_t kMaxElements = uint64_t(1) << 48;
    if (rows <= 0 || cols <= 0 ||
        static_cast<uint64_t>(rows) > kMaxElements / static_cast<uint64_t>(cols) ||
        matrices > kMaxElements / (static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols))) {
      return fail(where, "has ", matrices, " matrices of ", rows, " x ", cols);
    }
    if (q4 && cols % kernels::kQ4Group != 0) {
      return fail(where, "is Q4 with ", cols, " input features, not a multiple of ",
                  kernels::kQ4Group);
    }
    const int64_t m = static_cast<int64_t>(matrices);
    const uint64_t bytes = static_cast<uint64_t>(q4 ? kernels::q4Bytes(m, rows, cols)
                                                    : kernels::fp8Bytes(m, rows, cols));
    if (bytes > w.slice()->size()) {
      return fail(where, "needs ", bytes, " bytes but its slice holds ", w.slice()->size());
    }
    return Status::success();
  }

  Status checkStates() {
    if (const plan::StatePool *pool = plan_.state_pool()) {
      if (pool->max_sequences() < 1 || pool->page_tokens() < 1 ||
          pool->page_tokens() > pool->max_context() ||
          (pool->page_bytes() > 0 && pool->page_count() < 1)) {
        return fail("state pool", "of ", pool->max_sequences(), " sequences, ", pool->page_count(),
                    " pages of ", pool->page_tokens(), " tokens and ", pool->page_bytes(),
                    " bytes, ", pool->max_context(), " tokens of context");
      }
      if (pool->page_bytes() > 0) {
        GLM_RETURN_IF_ERROR(checkSlice("state pool", pool->slice()));
      }
    }
    if (plan_.states() == nullptr) {
      return Status::success();
    }
    for (const plan::StateLayout *s : *plan_.states()) {
      const std::string where = "state " + name(s->name());
      GLM_RETURN_IF_ERROR(checkNamed(where, s->name()));
      GLM_RETURN_IF_ERROR(checkAligned(where, "its unit shape", s->unit_shape()));
      GLM_RETURN_IF_ERROR(checkSlice(where, s->slice()));
      GLM_ASSIGN_OR_RETURN(uint64_t bytes, denseBytes(where, s->unit_shape(), s->element()));
      if (bytes != s->unit_bytes()) {
        return fail(where, "unit of ", bytes, " bytes recorded as ", s->unit_bytes());
      }
      const plan::StatePool *pool = plan_.state_pool();
      // The engines address slot `slot < max_sequences` of a per-sequence state, and page
      // `page < page_count` of a paged one.
      const uint64_t sequences = pool != nullptr ? pool->max_sequences() : 1;
      if (s->paged()) {
        if (pool == nullptr || pool->page_bytes() == 0) {
          return fail(where, "is paged but the plan has no page pool");
        }
        if (s->offset_in_page() > pool->page_bytes() ||
            s->unit_bytes() > pool->page_bytes() - s->offset_in_page()) {
          return fail(where, "rows of ", s->unit_bytes(), " bytes at ", s->offset_in_page(),
                      " overrun a page of ", pool->page_bytes(), " bytes");
        }
        if (s->slice()->size() / pool->page_bytes() < pool->page_count()) {
          return fail(where, "slice of ", s->slice()->size(), " bytes holds fewer than the pool's ",
                      pool->page_count(), " pages");
        }
      } else if (s->unit_bytes() != 0 && s->slice()->size() / s->unit_bytes() < sequences) {
        return fail(where, "slice of ", s->slice()->size(), " bytes holds fewer than ", sequences,
                    " slots of ", s->unit_bytes());
      }
    }
    return Status::success();
  }

  Status checkKernels() {
    if (plan_.kernels() == nullptr) {
      return Status::success();
    }
    for (const plan::Kernel *k : *plan_.kernels()) {
      if (k->entry() == nullptr || k->entry()->size() == 0) {
        return fail("kernel " + name(k->name()), "has no entry symbol");
      }
    }
    return Status::success();
  }

  Status checkIndices(const std::string &where, const flatbuffers::Vector<uint32_t> *indices,
                      size_t count, const char *what) {
    if (indices == nullptr) {
      return Status::success();
    }
    for (uint32_t i : *indices) {
      if (i >= count) {
        return fail(where, "names ", what, " ", i, " of ", count);
      }
    }
    return Status::success();
  }

  Status checkPrograms() {
    if (plan_.programs() == nullptr || plan_.programs()->size() == 0) {
      return fail("", "no programs");
    }
    std::set<std::string> names;
    const size_t weightCount = plan_.weights() ? plan_.weights()->size() : 0;
    const size_t stateCount = plan_.states() ? plan_.states()->size() : 0;
    const size_t kernelCount = plan_.kernels() ? plan_.kernels()->size() : 0;
    for (const plan::Program *program : *plan_.programs()) {
      const std::string pname = "program " + name(program->name());
      GLM_RETURN_IF_ERROR(checkNamed(pname, program->name()));
      if (!names.insert(name(program->name())).second) {
        return fail(pname, "appears twice");
      }
      if (program->batch() < 1 || program->rows() < 1) {
        return fail(pname, "has batch ", program->batch(), " and rows ", program->rows());
      }
      GLM_RETURN_IF_ERROR(checkIo(pname, *program));
      WrittenBytes written;
      for (const plan::IoSlot *io : *program->io()) {
        if (isInput(io->kind())) {
          written.add(*io->tensor()->slice(), tensorBytes(*io->tensor()));
        }
      }
      const size_t stepCount = program->steps() ? program->steps()->size() : 0;
      for (size_t i = 0; i < stepCount; ++i) {
        const plan::Step *step = program->steps()->Get(static_cast<flatbuffers::uoffset_t>(i));
        const std::string where =
            pname + ", step " + std::to_string(i) + " (" + name(step->name()) + ")";
        GLM_RETURN_IF_ERROR(checkNamed(where, step->name()));
        if (const auto *attributes = step->attributes()) {
          for (const plan::Attribute *a : *attributes) {
            GLM_RETURN_IF_ERROR(checkAligned(where, "an attribute's ints", a->ints()));
          }
        }
        for (const auto *list : {step->operands(), step->results()}) {
          if (list != nullptr) {
            for (const plan::TensorRef *t : *list) {
              GLM_RETURN_IF_ERROR(checkTensor(where, t));
            }
          }
        }
        GLM_RETURN_IF_ERROR(checkStepRows(where, *program, *step));
        GLM_RETURN_IF_ERROR(checkIndices(where, step->weights(), weightCount, "weight"));
        GLM_RETURN_IF_ERROR(checkIndices(where, step->states(), stateCount, "state"));
        if (step->op() == nullptr || step->op()->size() == 0) {
          return fail(where, "names no op");
        }
        const auto *launches = step->launches();
        for (uint32_t l = 0; launches != nullptr && l < launches->size(); ++l) {
          GLM_RETURN_IF_ERROR(checkLaunch(where, *step, *launches->Get(l), kernelCount));
        }
        if (const plan::Collective *c = step->collective()) {
          if (c->world() != plan_.tp()) {
            return fail(where, "collective over ", c->world(), " ranks in a TP ", plan_.tp(),
                        " plan");
          }
        }
        if (step->operands() != nullptr) {
          for (const plan::TensorRef *t : *step->operands()) {
            if (!written.covers(*t->slice(), tensorBytes(*t))) {
              return fail(where, "reads ", name(t->name()),
                          " before any io slot or earlier step writes it");
            }
          }
        }
        if (step->results() != nullptr) {
          for (const plan::TensorRef *t : *step->results()) {
            written.add(*t->slice(), tensorBytes(*t));
          }
        }
      }
      // Segments must cover the steps exactly, in order; a collective (which the host runs
      // between graphs) only ever ends one, and a segment ending at one says so.
      uint64_t next = 0;
      if (program->segments() != nullptr) {
        for (const plan::Segment *segment : *program->segments()) {
          if (segment->first_step() != next || segment->step_count() == 0 ||
              segment->step_count() > stepCount - next) {
            return fail(pname,
                        "segments do not cover the steps in order (expected one starting "
                        "at step ",
                        next, ")");
          }
          const uint64_t last = next + segment->step_count() - 1;
          for (uint64_t i = next; i <= last; ++i) {
            const plan::Step *step = program->steps()->Get(static_cast<flatbuffers::uoffset_t>(i));
            const bool ends = i == last && segment->end() == plan::SegmentEnd::Collective;
            if ((step->collective() != nullptr) != ends) {
              return fail(
                  pname, "segment at step ", next,
                  step->collective() != nullptr
                      ? strCat(" holds collective ", name(step->name()),
                               " but does not end at it (the host runs collectives "
                               "between graphs)")
                      : strCat(" ends at ", name(step->name()), ", which is not a collective"));
            }
          }
          next += segment->step_count();
        }
      }
      if (next != stepCount) {
        return fail(pname, "segments cover ", next, " of ", stepCount, " steps");
      }
    }
    return Status::success();
  }

  /// The io slots the engines write before a run and read after it: one of each kind at most,
  /// each of the shape and element type its kind has (plan.fbs), one vocabulary in all programs.
  Status checkIo(const std::string &pname, const plan::Program &program) {
    if (program.io() == nullptr) {
      return fail(pname, "has no io slots");
    }
    const int64_t batch = program.batch(), rows = int64_t{program.batch()} * program.rows();
    // The engines read the logits rows the program says it computes.
    const int64_t logitsRows = program.last_row_logits() ? batch : rows;
    std::set<plan::IoKind> seen;
    bool logits = false;
    for (const plan::IoSlot *io : *program.io()) {
      GLM_RETURN_IF_ERROR(checkTensor(pname + " io", io->tensor()));
      const plan::TensorRef &t = *io->tensor();
      const std::string what = strCat(pname, " io slot ", plan::EnumNameIoKind(io->kind()));
      if (!seen.insert(io->kind()).second) {
        return fail(what, "appears twice");
      }
      const auto &shape = *t.shape();
      auto is = [&](plan::ElementType element, std::initializer_list<int64_t> dims) {
        bool same = t.element() == element && shape.size() == dims.size();
        uint32_t d = 0;
        for (int64_t want : dims) {
          same = same && shape.Get(d++) == want;
        }
        return same ? Status::success()
                    : fail(what, "is ", plan::EnumNameElementType(t.element()), " of ",
                           shape.size(), " dimensions, not ", plan::EnumNameElementType(element),
                           " ", shapeText(dims));
      };
      switch (io->kind()) {
      case plan::IoKind::TokenIds:
      case plan::IoKind::Positions:
        GLM_RETURN_IF_ERROR(is(plan::ElementType::I32, {rows}));
        break;
      case plan::IoKind::SequenceSlots:
        GLM_RETURN_IF_ERROR(is(plan::ElementType::I32, {batch}));
        break;
      case plan::IoKind::PageTable:
        GLM_RETURN_IF_ERROR(
            is(plan::ElementType::I32, {batch, shape.size() == 2 ? shape.Get(1) : 0}));
        if (shape.Get(1) < 1) {
          return fail(what, "has no pages a sequence");
        }
        break;
      case plan::IoKind::SamplingParams:
        GLM_RETURN_IF_ERROR(is(plan::ElementType::I32, {batch, kernels::kSampleParamWords}));
        break;
      case plan::IoKind::LogitBias:
        GLM_RETURN_IF_ERROR(is(plan::ElementType::I32, {batch, 2 * kernels::kSampleBiasEntries}));
        break;
      case plan::IoKind::Logits: {
        const int64_t vocab = shape.size() == 2 ? shape.Get(1) : 0;
        GLM_RETURN_IF_ERROR(is(plan::ElementType::F32, {logitsRows, vocab}));
        if (vocab_ != 0 && vocab != vocab_) {
          return fail(what, "has ", vocab, " logits a row, another program ", vocab_);
        }
        vocab_ = vocab;
        logits = true;
        break;
      }
      case plan::IoKind::TokenMask:
      case plan::IoKind::SampledIds:
      case plan::IoKind::SampledLogprobs:
      case plan::IoKind::DraftIds:
        break; // after the logits slot, which gives the vocabulary and rows they follow
      default:
        return fail(what, "is of an unknown kind");
      }
    }
    if (!logits) {
      return fail(pname, "has no logits io slot");
    }
    for (const plan::IoSlot *io : *program.io()) {
      const plan::TensorRef &t = *io->tensor();
      const std::string what = strCat(pname, " io slot ", plan::EnumNameIoKind(io->kind()));
      const bool ids =
          io->kind() == plan::IoKind::SampledIds || io->kind() == plan::IoKind::DraftIds;
      if (ids || io->kind() == plan::IoKind::SampledLogprobs) {
        const plan::ElementType element = ids ? plan::ElementType::I32 : plan::ElementType::F32;
        if (t.element() != element || t.shape()->size() != 2 || t.shape()->Get(0) != logitsRows ||
            t.shape()->Get(1) != 1 + kernels::kSampleTopLogprobs) {
          return fail(what, "is not ", plan::EnumNameElementType(element), " [", logitsRows, ", ",
                      1 + kernels::kSampleTopLogprobs, "]");
        }
      } else if (io->kind() == plan::IoKind::TokenMask &&
                 (t.element() != plan::ElementType::I32 || t.shape()->size() != 2 ||
                  t.shape()->Get(0) != batch || t.shape()->Get(1) != kernels::maskWords(vocab_))) {
        return fail(what, "is not I32 [", batch, ", ", kernels::maskWords(vocab_), "]");
      }
    }
    return Status::success();
  }

  /// A step's rows are the program's (batch x rows), or one per sequence after a last_rows
  /// step: the engines run a step on as many rows as its first tensor says it has, so that
  /// tensor must be one of those two sizes.
  Status checkStepRows(const std::string &where, const plan::Program &program,
                       const plan::Step &step) {
    const auto *tensors =
        step.operands() && step.operands()->size() > 0 ? step.operands() : step.results();
    if (tensors == nullptr || tensors->size() == 0) {
      return fail(where, "has neither operands nor results");
    }
    const auto *shape = tensors->Get(0)->shape();
    const int64_t rows = shape != nullptr && shape->size() > 0 ? shape->Get(0) : -1;
    const int64_t all = int64_t{program.batch()} * program.rows();
    if (rows != all && rows != program.batch()) {
      return fail(where, "runs on ", rows, " rows; its program has ", all, " (or ", program.batch(),
                  " after last_rows)");
    }
    return Status::success();
  }

  /// The io kinds the host writes before a run.
  static bool isInput(plan::IoKind kind) {
    return kind != plan::IoKind::Logits && kind != plan::IoKind::SampledIds &&
           kind != plan::IoKind::SampledLogprobs && kind != plan::IoKind::DraftIds;
  }

  /// A checked tensor's bytes (checkTensor has bounded them by its slice).
  static uint64_t tensorBytes(const plan::TensorRef &t) {
    uint64_t bytes = elementSize(t.element());
    for (int64_t d : *t.shape()) {
      bytes *= static_cast<uint64_t>(d);
    }
    return bytes;
  }

  static std::string shapeText(std::initializer_list<int64_t> dims) {
    std::string text = "[";
    for (int64_t d : dims) {
      text += strCat(text.size() > 1 ? ", " : "", d);
    }
    return text + "]";
  }

  /// A launch's kernel, geometry, argument struct and bindings: the engine writes 8-byte
  /// addresses (4-byte ranks) at each binding's offset, so each must lie inside the struct and
  /// name something the step has.
  Status checkLaunch(const std::string &where, const plan::Step &step,
                     const plan::KernelLaunch &launch, size_t kernelCount) {
    if (launch.kernel() >= kernelCount) {
      return fail(where, "launches kernel ", launch.kernel(), " of ", kernelCount);
    }
    for (const auto *dims : {launch.grid(), launch.block()}) {
      if (dims == nullptr || dims->size() != 3) {
        return fail(where, "launch needs 3 grid and 3 block dimensions");
      }
      for (uint32_t d : *dims) {
        if (d == 0) {
          return fail(where, "launch has a zero dimension");
        }
      }
    }
    const size_t size = launch.args() != nullptr ? launch.args()->size() : 0;
    if (size == 0 || size > plan::kMaxLaunchArgsBytes) {
      return fail(where, "launch has a ", size, "-byte argument struct (1 to ",
                  plan::kMaxLaunchArgsBytes, ")");
    }
    if (launch.bindings() == nullptr) {
      return Status::success();
    }
    for (const plan::ArgBinding *b : *launch.bindings()) {
      const size_t width = b->source() == plan::ArgSource::RankTimes ? 4 : 8;
      if (b->offset() > size || width > size - b->offset()) {
        return fail(where, "argument binding at byte ", b->offset(), " overruns its ", size,
                    "-byte struct");
      }
      size_t count = 0;
      switch (b->source()) {
      case plan::ArgSource::Operand:
        count = step.operands() ? step.operands()->size() : 0;
        break;
      case plan::ArgSource::Result:
        count = step.results() ? step.results()->size() : 0;
        break;
      case plan::ArgSource::Weight:
        count = step.weights() ? step.weights()->size() : 0;
        break;
      case plan::ArgSource::State:
        count = step.states() ? step.states()->size() : 0;
        break;
      case plan::ArgSource::Workspace:
        count = workspaceArena_ >= 0 ? 1 : 0;
        if (count != 0 && b->add() > plan_.arenas()->Get(workspaceArena_)->size()) {
          return fail(where, "argument binding points ", b->add(), " bytes into a workspace of ",
                      plan_.arenas()->Get(workspaceArena_)->size());
        }
        break;
      case plan::ArgSource::RankTimes:
        continue;
      }
      if (b->index() >= count && b->source() != plan::ArgSource::Workspace) {
        return fail(where, "argument binding names ", plan::EnumNameArgSource(b->source()), " ",
                    b->index(), " of ", count);
      }
      if (count == 0) {
        return fail(where, "argument binding names a workspace the plan does not have");
      }
    }
    return Status::success();
  }

  const plan::Plan &plan_;
  const std::string &source_;
  int64_t workspaceArena_ = -1;
  int64_t vocab_ = 0;
};

} // namespace

Status validatePlan(const plan::Plan &plan, const std::string &source) {
  return Validator(plan, source).run();
}

Expected<std::unique_ptr<PlanFile>> PlanFile::fromBytes(std::span<const uint8_t> bytes,
                                                        std::string source) {
  if (bytes.size() > kMaxPlanBytes) {
    return formatError(source, ": ", bytes.size(), " bytes is larger than any plan (limit ",
                       kMaxPlanBytes, ")");
  }
  if (bytes.size() < 8 || !plan::PlanBufferHasIdentifier(bytes.data())) {
    return formatError(source, ": not a glmc plan (no GLMP identifier)");
  }
  std::unique_ptr<PlanFile> file(new PlanFile());
  file->source_ = std::move(source);
  file->size_ = bytes.size();
  file->storage_.resize((bytes.size() + 7) / 8);
  std::memcpy(file->storage_.data(), bytes.data(), bytes.size());
  flatbuffers::Verifier verifier(file->data(), file->size_);
  if (!plan::VerifyPlanBuffer(verifier)) {
    return formatError(file->source_, ": corrupt plan (flatbuffers verification failed)");
  }
  // Damage first: a file that is not the bytes glmc wrote is refused as such before any field
  // is believed (format version 6 on; older plans are refused by version below).
  const plan::Plan *root = plan::GetPlan(file->data());
  if (root->format_version() == kPlanFormatVersion &&
      root->content_hash() != plan::planContentHash({file->data(), file->size_})) {
    return formatError(file->source_, ": damaged plan (its content hash does not match; copy or "
                                      "recompile it)");
  }
  file->root_ = root;
  GLM_RETURN_IF_ERROR(validatePlan(*file->root_, file->source_));
  return file;
}

Expected<std::unique_ptr<PlanFile>> PlanFile::open(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return notFound(path.string(), ": cannot open plan");
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kMaxPlanBytes) {
    return formatError(path.string(), ": size ", size, " is not that of a plan");
  }
  in.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char *>(bytes.data()), size);
  if (!in) {
    return ioError(path.string(), ": read failed");
  }
  return fromBytes(bytes, path.string());
}

Status PlanFile::checkRunnableOn(plan::Arch arch) const {
  if (arch == plan::Arch::Cpu || root_->kernels() == nullptr) {
    return Status::success();
  }
  for (const plan::Kernel *k : *root_->kernels()) {
    bool found = false;
    if (k->cubins() != nullptr) {
      for (const plan::Cubin *c : *k->cubins()) {
        found |= c->arch() == arch && c->image() != nullptr && c->image()->size() > 0;
      }
    }
    if (!found) {
      return Status(StatusCode::Unavailable,
                    strCat(source_, ": kernel ", k->name() ? k->name()->str() : "?",
                           " has no cubin for ", plan::EnumNameArch(arch),
                           " (compile the plan for this GPU)"));
    }
  }
  return Status::success();
}

} // namespace glm::runtime
