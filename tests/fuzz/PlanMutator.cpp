// The plan fuzz targets' structure-aware mutator. It works on flatc's object API of plan.fbs,
// generated for the fuzzers alone into namespace glm::fuzzplan (tests/fuzz/CMakeLists.txt), so
// the runtime's own glm::plan classes are untouched and nothing here is linked into glmc. A mutant
// gets a content hash of its own (runtime/schema/PlanHash.h): hostile plans carry valid hashes,
// only damaged ones do not.
#include "tests/fuzz/PlanMutator.h"

#include "runtime/schema/PlanHash.h"
#include "tests/fuzz/plan_object_generated.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace glm::fuzz {
namespace {

namespace fp = glm::fuzzplan;
using Rng = std::mt19937_64;

size_t pick(Rng &rng, size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); }
bool oneIn(Rng &rng, unsigned n) { return rng() % n == 0; }

/// A nearby or extreme value of an integer field: ±1, ±k for the sizes plans are made of (element
/// widths, vectors, pages), doubled, halved, zero, one, the type's extremes, or random bits.
template <typename T> T tweak(T v, Rng &rng) {
  // Wrapping arithmetic (in the unsigned type), as a hostile file may hold any value.
  using U = std::make_unsigned_t<T>;
  static constexpr uint64_t kSteps[] = {1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 4096, 65536};
  const U u = static_cast<U>(v);
  const U step = static_cast<U>(kSteps[pick(rng, std::size(kSteps))]);
  switch (pick(rng, 12)) {
  case 0:
  case 1:
    return static_cast<T>(static_cast<U>(u + 1));
  case 2:
  case 3:
    return static_cast<T>(static_cast<U>(u - 1));
  case 4:
    return static_cast<T>(static_cast<U>(u + step));
  case 5:
    return static_cast<T>(static_cast<U>(u - step));
  case 6:
    return static_cast<T>(static_cast<U>(u * 2));
  case 7:
    return static_cast<T>(v / 2);
  case 8:
    return static_cast<T>(pick(rng, 2));
  case 9:
    return oneIn(rng, 2) ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
  case 10:
    return static_cast<T>(static_cast<U>(1) << pick(rng, sizeof(T) * 8 - 1));
  default:
    return static_cast<T>(rng());
  }
}

/// Pointers to every mutable place of one plan, collected afresh before each change (structural
/// changes move vectors).
struct Sites {
  std::vector<fp::ProgramT *> programs;
  std::vector<std::vector<std::unique_ptr<fp::TensorRefT>> *> tensorLists; // operands, results
  std::vector<fp::TensorRefT *> tensors;                                   // + io tensors
  std::vector<std::unique_ptr<fp::Slice> *> slices;
  std::vector<std::vector<int64_t> *> shapes;
  std::vector<fp::StepT *> steps;
  std::vector<fp::AttributeT *> attributes;
  std::vector<std::vector<uint32_t> *> indexLists; // step weights, states
  std::vector<uint32_t *> u32;                     // counts and indices
  std::vector<uint64_t *> u64;                     // sizes and byte counts
  std::vector<std::string *> names;
  std::set<std::string> ops;
};

void addTensor(Sites &s, fp::TensorRefT *t) {
  if (!t) {
    return;
  }
  s.tensors.push_back(t);
  s.slices.push_back(&t->slice);
  s.shapes.push_back(&t->shape);
  s.names.push_back(&t->name);
}

Sites collect(fp::PlanT &plan) {
  Sites s;
  s.u32.push_back(&plan.tp);
  s.u32.push_back(&plan.format_version);
  for (auto &arena : plan.arenas) {
    s.u64.push_back(&arena->size);
    s.u32.push_back(&arena->alignment);
    s.names.push_back(&arena->name);
  }
  for (auto &w : plan.weights) {
    s.slices.push_back(&w->slice);
    s.shapes.push_back(&w->global_shape);
    s.shapes.push_back(&w->rank_shape);
    s.u32.push_back(&w->experts);
    s.u32.push_back(&w->shard_dim);
    s.names.push_back(&w->name);
    s.names.push_back(&w->checkpoint);
  }
  for (auto &st : plan.states) {
    s.slices.push_back(&st->slice);
    s.shapes.push_back(&st->unit_shape);
    s.u64.push_back(&st->unit_bytes);
    s.u64.push_back(&st->offset_in_page);
    s.names.push_back(&st->name);
  }
  if (plan.state_pool) {
    fp::StatePoolT &pool = *plan.state_pool;
    s.slices.push_back(&pool.slice);
    s.u32.push_back(&pool.max_sequences);
    s.u64.push_back(&pool.max_context);
    s.u32.push_back(&pool.page_tokens);
    s.u64.push_back(&pool.page_bytes);
    s.u32.push_back(&pool.page_count);
  }
  for (auto &k : plan.kernels) {
    s.names.push_back(&k->name);
  }
  for (auto &program : plan.programs) {
    s.programs.push_back(program.get());
    s.u32.push_back(&program->batch);
    s.u32.push_back(&program->rows);
    s.names.push_back(&program->name);
    for (auto &io : program->io) {
      addTensor(s, io->tensor.get());
    }
    for (auto &seg : program->segments) {
      s.u32.push_back(&seg->first_step);
      s.u32.push_back(&seg->step_count);
    }
    for (auto &step : program->steps) {
      s.steps.push_back(step.get());
      s.ops.insert(step->op);
      s.names.push_back(&step->name);
      s.tensorLists.push_back(&step->operands);
      s.tensorLists.push_back(&step->results);
      for (auto &t : step->operands) {
        addTensor(s, t.get());
      }
      for (auto &t : step->results) {
        addTensor(s, t.get());
      }
      s.indexLists.push_back(&step->weights);
      s.indexLists.push_back(&step->states);
      for (uint32_t &w : step->weights) {
        s.u32.push_back(&w);
      }
      for (uint32_t &st : step->states) {
        s.u32.push_back(&st);
      }
      for (auto &a : step->attributes) {
        s.attributes.push_back(a.get());
      }
      for (auto &launch : step->launches) {
        s.u32.push_back(&launch->kernel);
        s.u32.push_back(&launch->shared_memory);
        for (uint32_t &g : launch->grid) {
          s.u32.push_back(&g);
        }
        for (uint32_t &b : launch->block) {
          s.u32.push_back(&b);
        }
      }
      if (step->collective) {
        s.u32.push_back(&step->collective->axis);
        s.u32.push_back(&step->collective->world);
      }
    }
  }
  return s;
}

template <typename T> void dropOrDuplicate(std::vector<T> &list, Rng &rng) {
  if (list.empty()) {
    return;
  }
  const size_t i = pick(rng, list.size());
  switch (pick(rng, 3)) {
  case 0:
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  case 1:
    if constexpr (std::is_copy_constructible_v<T>) {
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(pick(rng, list.size() + 1)), list[i]);
    } else {
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(pick(rng, list.size() + 1)),
                  std::make_unique<typename T::element_type>(*list[i]));
    }
    break;
  default:
    std::swap(list[i], list[pick(rng, list.size())]);
    break;
  }
}

/// One change to `plan`; false when the plan has no place of the chosen kind.
bool mutateOnce(fp::PlanT &plan, Rng &rng) {
  Sites s = collect(plan);
  switch (pick(rng, 18)) {
  case 0: { // a step's op: another op of the plan, or a near miss of its own
    if (s.steps.empty()) {
      return false;
    }
    fp::StepT &step = *s.steps[pick(rng, s.steps.size())];
    if (!oneIn(rng, 4) && !s.ops.empty()) {
      auto it = s.ops.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(pick(rng, s.ops.size())));
      step.op = *it;
    } else if (!step.op.empty()) {
      step.op[pick(rng, step.op.size())] = static_cast<char>(rng());
    }
    return true;
  }
  case 1:
  case 2: { // an operand or result dropped, duplicated or two swapped
    if (s.tensorLists.empty()) {
      return false;
    }
    dropOrDuplicate(*s.tensorLists[pick(rng, s.tensorLists.size())], rng);
    return true;
  }
  case 3: { // an operand or result rewired to another tensor of the plan
    if (s.tensorLists.empty() || s.tensors.empty()) {
      return false;
    }
    auto &list = *s.tensorLists[pick(rng, s.tensorLists.size())];
    if (list.empty()) {
      return false;
    }
    list[pick(rng, list.size())] =
        std::make_unique<fp::TensorRefT>(*s.tensors[pick(rng, s.tensors.size())]);
    return true;
  }
  case 4:
  case 5: { // a slice's offset or size moved by 1 or k bytes, or its arena changed
    if (s.slices.empty()) {
      return false;
    }
    std::unique_ptr<fp::Slice> &slice = *s.slices[pick(rng, s.slices.size())];
    if (!slice) {
      return false;
    }
    uint32_t arena = slice->arena();
    uint64_t offset = slice->offset();
    uint64_t size = slice->size();
    switch (pick(rng, 4)) {
    case 0:
    case 1:
      offset = tweak(offset, rng);
      break;
    case 2:
      size = tweak(size, rng);
      break;
    default:
      arena = oneIn(rng, 2) ? tweak(arena, rng) : static_cast<uint32_t>(pick(rng, 6));
      break;
    }
    slice = std::make_unique<fp::Slice>(arena, offset, size);
    return true;
  }
  case 6:
  case 7: { // a shape dimension changed, dropped or added
    if (s.shapes.empty()) {
      return false;
    }
    std::vector<int64_t> &shape = *s.shapes[pick(rng, s.shapes.size())];
    const size_t kind = pick(rng, 6);
    if (kind == 0 && !shape.empty()) {
      shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(pick(rng, shape.size())));
    } else if (kind == 1) {
      shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(pick(rng, shape.size() + 1)),
                   static_cast<int64_t>(pick(rng, 3)));
    } else if (kind == 2 && shape.size() > 1) {
      std::swap(shape[pick(rng, shape.size())], shape[pick(rng, shape.size())]);
    } else if (!shape.empty()) {
      int64_t &d = shape[pick(rng, shape.size())];
      d = oneIn(rng, 5) ? -static_cast<int64_t>(pick(rng, 3)) : tweak(d, rng);
    }
    return true;
  }
  case 8: { // steps of a program swapped (often neighbours), deleted or duplicated
    if (s.programs.empty()) {
      return false;
    }
    auto &steps = s.programs[pick(rng, s.programs.size())]->steps;
    if (steps.size() < 2) {
      return false;
    }
    if (oneIn(rng, 2)) {
      const size_t i = pick(rng, steps.size() - 1);
      std::swap(steps[i], steps[i + 1]);
    } else {
      dropOrDuplicate(steps, rng);
    }
    return true;
  }
  case 9:
  case 10: { // an attribute value
    if (s.attributes.empty()) {
      return false;
    }
    fp::AttributeT &a = *s.attributes[pick(rng, s.attributes.size())];
    switch (pick(rng, 5)) {
    case 0:
    case 1:
      a.int_value = tweak(a.int_value, rng);
      break;
    case 2: {
      static constexpr double kFloats[] = {0.0,
                                           -1.0,
                                           1e30,
                                           -1e-30,
                                           std::numeric_limits<double>::infinity(),
                                           std::numeric_limits<double>::quiet_NaN()};
      a.float_value = oneIn(rng, 2) ? kFloats[pick(rng, std::size(kFloats))] : a.float_value * 2;
      break;
    }
    case 3:
      if (!a.ints.empty()) {
        int64_t &v = a.ints[pick(rng, a.ints.size())];
        v = tweak(v, rng);
      } else {
        a.ints.push_back(tweak<int64_t>(0, rng));
      }
      break;
    default:
      dropOrDuplicate(a.ints, rng);
      break;
    }
    return true;
  }
  case 11: { // a step's attribute dropped or duplicated
    if (s.steps.empty()) {
      return false;
    }
    dropOrDuplicate(s.steps[pick(rng, s.steps.size())]->attributes, rng);
    return true;
  }
  case 12:
  case 13: { // an index or count: weight, state, kernel, segment, batch, rows, pool, tp, ...
    if (s.u32.empty()) {
      return false;
    }
    uint32_t &v = *s.u32[pick(rng, s.u32.size())];
    v = tweak(v, rng);
    return true;
  }
  case 14: { // a step's weight or state list: an entry dropped, duplicated or swapped
    if (s.indexLists.empty()) {
      return false;
    }
    dropOrDuplicate(*s.indexLists[pick(rng, s.indexLists.size())], rng);
    return true;
  }
  case 15: { // a byte size: an arena, a state unit, a page
    if (s.u64.empty()) {
      return false;
    }
    uint64_t &v = *s.u64[pick(rng, s.u64.size())];
    v = tweak(v, rng);
    return true;
  }
  case 16: { // an element type, sometimes outside the enum
    if (s.tensors.empty()) {
      return false;
    }
    fp::TensorRefT &t = *s.tensors[pick(rng, s.tensors.size())];
    t.element = static_cast<fp::ElementType>(oneIn(rng, 8) ? rng() : pick(rng, 8));
    return true;
  }
  default: { // a name: emptied, cut, or given a byte that is not UTF-8; or an io slot changed
    if (oneIn(rng, 2) && !s.programs.empty()) {
      auto &io = s.programs[pick(rng, s.programs.size())]->io;
      if (io.empty()) {
        return false;
      }
      if (oneIn(rng, 2)) {
        fp::IoSlotT &slot = *io[pick(rng, io.size())];
        slot.kind = static_cast<fp::IoKind>(pick(rng, 11));
      } else {
        dropOrDuplicate(io, rng);
      }
      return true;
    }
    if (s.names.empty()) {
      return false;
    }
    std::string &name = *s.names[pick(rng, s.names.size())];
    switch (pick(rng, 3)) {
    case 0:
      name.clear();
      break;
    case 1:
      name.resize(pick(rng, name.size() + 1));
      break;
    default:
      name.insert(pick(rng, name.size() + 1), 1, static_cast<char>(0x80 | (rng() & 0x7F)));
      break;
    }
    return true;
  }
  }
}

/// Whether every 8-byte vector of the plan (shapes, attribute ints) starts 8-aligned. flatbuffers'
/// verifier checks only their 4-byte length, so a byte-mutated plan can hold one that does not,
/// and unpacking it would be a misaligned load in the mutator itself (the validator meeting such a
/// plan is the finding; the mutator then mutates its bytes instead).
bool vectorsAligned(const fp::Plan &plan) {
  auto ok = [](const flatbuffers::Vector<int64_t> *v) {
    return v == nullptr || reinterpret_cast<uintptr_t>(v->Data()) % alignof(int64_t) == 0;
  };
  auto tensorOk = [&](const fp::TensorRef *t) { return t == nullptr || ok(t->shape()); };
  if (plan.weights()) {
    for (const fp::WeightBinding *w : *plan.weights()) {
      if (!ok(w->global_shape()) || !ok(w->rank_shape())) {
        return false;
      }
    }
  }
  if (plan.states()) {
    for (const fp::StateLayout *st : *plan.states()) {
      if (!ok(st->unit_shape())) {
        return false;
      }
    }
  }
  if (plan.programs()) {
    for (const fp::Program *program : *plan.programs()) {
      if (program->io()) {
        for (const fp::IoSlot *io : *program->io()) {
          if (!tensorOk(io->tensor())) {
            return false;
          }
        }
      }
      if (!program->steps()) {
        continue;
      }
      for (const fp::Step *step : *program->steps()) {
        for (const auto *list : {step->operands(), step->results()}) {
          if (list) {
            for (const fp::TensorRef *t : *list) {
              if (!tensorOk(t)) {
                return false;
              }
            }
          }
        }
        if (step->attributes()) {
          for (const fp::Attribute *a : *step->attributes()) {
            if (!ok(a->ints())) {
              return false;
            }
          }
        }
      }
    }
  }
  return true;
}

/// libFuzzer's byte-level mutation; half its mutants that still verify are sealed again, since a
/// hostile file computes its hash: only those reach the validator past the hash check (unaligned
/// 8-byte vectors, which flatbuffers' verifier lets through, among them).
size_t mutateBytes(uint8_t *data, size_t size, size_t maxSize, Rng &rng) {
  const size_t n = LLVMFuzzerMutate(data, size, maxSize);
  if (oneIn(rng, 2)) {
    flatbuffers::Verifier verifier(data, n, /*max_depth=*/64, /*max_tables=*/10'000'000);
    if (glm::plan::VerifyPlanBuffer(verifier)) {
      glm::plan::sealPlanBuffer(std::span(data, n));
    }
  }
  return n;
}

} // namespace

size_t mutatePlan(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  Rng rng(seed);
  flatbuffers::Verifier verifier(data, size, /*max_depth=*/64, /*max_tables=*/10'000'000);
  // Byte-level changes too: the flatbuffers verifier, the hash check and truncated files need
  // them.
  if (oneIn(rng, 6) || !fp::VerifyPlanBuffer(verifier) || !vectorsAligned(*fp::GetPlan(data))) {
    return mutateBytes(data, size, maxSize, rng);
  }
  std::unique_ptr<fp::PlanT> plan = fp::UnPackPlan(data);
  const size_t changes = 1 + pick(rng, oneIn(rng, 3) ? 4 : 1);
  bool changed = false;
  for (size_t i = 0; i < changes * 4 && !changed; ++i) {
    for (size_t c = 0; c < changes; ++c) {
      changed = mutateOnce(*plan, rng) || changed;
    }
  }
  if (!changed) {
    return mutateBytes(data, size, maxSize, rng);
  }
  // Non-zero, so that flatbuffers writes the field the seal then fills in.
  plan->content_hash = 1;
  flatbuffers::FlatBufferBuilder fbb(size + 1024);
  fp::FinishPlanBuffer(fbb, fp::Plan::Pack(fbb, plan.get()));
  if (fbb.GetSize() > maxSize) {
    return mutateBytes(data, size, maxSize, rng);
  }
  std::memcpy(data, fbb.GetBufferPointer(), fbb.GetSize());
  glm::plan::sealPlanBuffer(std::span(data, fbb.GetSize()));
  return fbb.GetSize();
}

} // namespace glm::fuzz
