// OpContract: what a step must hold for its op's adapter to read it safely. Each op's folder
// declares its contract once, in `<op>Check(const OpStep &)` beside the adapters that rely on it
// (kernels/<op>/<op>_op.cpp): operand, result, weight and state counts, element types, shapes and
// their relations, and parameter ranges. The plan validator runs it on every step of a plan file
// before anything executes (runtime/engine/PlanContracts.h), and the compiler on every step it
// writes, so a plan the compiler emits and a plan a file holds meet one rule.
//
// The tensors' slices are checked against their shapes before (the plan validator: every slice
// inside its arena and large enough for its shape and element type), so a contract that holds means
// every buffer the adapter addresses is as large as it reads.
#pragma once

#include "kernels/common/OpStep.h"

#include <cmath>
#include <initializer_list>
#include <string>

namespace glm::kernels {

/// Checks a step against its op's contract, keeping the first breach: after one, every check
/// passes and shapes read as zero, so that a contract reads top to bottom without early returns.
class Contract {
public:
  explicit Contract(const OpStep &step) : step_(step) {}

  /// Operands (the step context included), results and states exactly; weights in [min, max].
  Contract &counts(size_t operands, size_t results, size_t minWeights, size_t maxWeights,
                   size_t states) {
    check(step_.operandCount() == operands, "has ", step_.operandCount(),
          " operands, its op reads ", operands);
    check(step_.resultCount() == results, "has ", step_.resultCount(), " results, its op writes ",
          results);
    check(step_.weightCount() >= minWeights && step_.weightCount() <= maxWeights, "has ",
          step_.weightCount(), " weights, its op reads ", minWeights,
          minWeights == maxWeights ? "" : strCat(" to ", maxWeights));
    check(step_.stateCount() == states, "has ", step_.stateCount(), " states, its op reads ",
          states);
    return *this;
  }

  /// Operand or result `i` of `rank` dimensions, each positive, holding `element`; its shape (zeros
  /// after a breach).
  Shape operand(size_t i, DType element, int rank) {
    return tensor("operand", i, ok() ? step_.operand(i) : TensorInfo{}, element, rank);
  }
  Shape result(size_t i, DType element, int rank) {
    return tensor("result", i, ok() ? step_.result(i) : TensorInfo{}, element, rank);
  }
  /// A float activation: the plan's activation type, or f32 (which some bf16 plans keep).
  DType activation() const { return step_.activation(); }

  /// Operand or result `i` is exactly `dims` of `element`.
  void operandIs(size_t i, DType element, std::initializer_list<int64_t> dims) {
    is("operand", i, operand(i, element, static_cast<int>(dims.size())), dims);
  }
  void resultIs(size_t i, DType element, std::initializer_list<int64_t> dims) {
    is("result", i, result(i, element, static_cast<int>(dims.size())), dims);
  }

  /// The step context's operands from `first`: positions [rows] and sequence slots [batch], then
  /// (`paged`) the page table [batch, pages].
  void stepContext(size_t first, bool paged) {
    operandIs(first, DType::I32, {step_.rows()});
    operandIs(first + 1, DType::I32, {step_.batch()});
    if (paged) {
      const Shape table = operand(first + 2, DType::I32, 2);
      check(table[0] == step_.batch(), "page table has ", table[0], " rows for ", step_.batch(),
            " sequences");
      check(step_.pageTokens() > 0 && step_.pageBytes() > 0,
            "reads paged state, but the plan has no page pool");
    }
  }

  /// Weight `i` (when present) has the logical shape `dims`, whatever its encoding.
  void weightIs(size_t i, std::initializer_list<int64_t> dims) {
    if (!ok() || !step_.hasWeight(i)) {
      return;
    }
    const WeightInfo w = step_.weight(i);
    bool same = w.shape.rank == static_cast<int>(dims.size());
    int d = 0;
    for (int64_t want : dims) {
      same = same && w.shape[d++] == want;
    }
    check(same, "weight ", i, " (", w.name, ") is ", shapeText(w.shape), ", its op reads ",
          listText(dims));
  }
  /// Weight `i`'s shape (zeros after a breach or when absent), of `rank` dimensions.
  Shape weight(size_t i, int rank) {
    if (!ok() || !step_.hasWeight(i)) {
      return {};
    }
    const WeightInfo w = step_.weight(i);
    check(w.shape.rank == rank, "weight ", i, " (", w.name, ") is ", shapeText(w.shape),
          ", its op reads ", rank, " dimensions");
    for (int d = 0; ok() && d < w.shape.rank; ++d) {
      check(w.shape[d] > 0, "weight ", i, " (", w.name, ") is ", shapeText(w.shape));
    }
    return ok() ? w.shape : Shape{};
  }
  /// Weight `i` is dense (plain elements, or a Q4/fp8 encoding), not EXL3.
  void weightDense(size_t i) {
    if (ok() && step_.hasWeight(i)) {
      check(!step_.weight(i).exl3, "weight ", i, " (", step_.weight(i).name,
            ") is EXL3, which its op reads only as a linear's or an expert's");
    }
  }

  /// State `i` holds `values` elements a unit (a sequence's slot, or a paged row): ids and counts
  /// (`DType::I32`), or floats in any type the kernels take (f32, bf16, f16, fp8 e4m3).
  void stateHolds(size_t i, DType kind, int64_t values) {
    if (!ok()) {
      return;
    }
    const StateInfo s = step_.state(i);
    const bool typeOk = kind == DType::I32
                            ? s.element == DType::I32
                            : s.element == DType::F32 || s.element == DType::BF16 ||
                                  s.element == DType::F16 || s.element == DType::F8_E4M3;
    check(
        typeOk && values >= 0 && s.unitBytes == values * static_cast<int64_t>(dtypeSize(s.element)),
        "state ", i, " (", s.name, ") is ", dtypeName(s.element), " units of ", s.unitBytes,
        " bytes, its op reads ", values, kind == DType::I32 ? " i32" : " float", " values a unit");
  }
  /// State `i` is paged: `unitsPerPage` rows of `values` elements to a page, inside the page.
  void pagedStateHolds(size_t i, DType kind, int64_t values, int64_t unitsPerPage) {
    stateHolds(i, kind, values);
    if (!ok()) {
      return;
    }
    const StateInfo s = step_.state(i);
    check(unitsPerPage > 0 && s.offsetInPage >= 0 &&
              s.offsetInPage + unitsPerPage * s.unitBytes <= step_.pageBytes(),
          "state ", i, " (", s.name, "): ", unitsPerPage, " rows of ", s.unitBytes,
          " bytes from byte ", s.offsetInPage, " overrun a page of ", step_.pageBytes());
  }

  /// Weight `i` (when present) holds `values` elements in all, whatever its dimensions (the
  /// checkpoint's vectors come as [n] or [1, n]).
  void weightHolds(size_t i, int64_t values) {
    if (ok() && step_.hasWeight(i)) {
      const WeightInfo w = step_.weight(i);
      check(w.shape.rank >= 1 && w.shape.numel() == values, "weight ", i, " (", w.name, ") is ",
            shapeText(w.shape), ", its op reads ", values, " values");
    }
  }

  /// Operand or result `i` has `like`'s shape, of `element`.
  void operandAs(size_t i, DType element, const Shape &like) {
    same("operand", i, operand(i, element, like.rank), like);
  }
  void resultAs(size_t i, DType element, const Shape &like) {
    same("result", i, result(i, element, like.rank), like);
  }

  /// An integer parameter in [min, max], or `fallback` when the step has none.
  int64_t intParam(std::string_view key, int64_t fallback, int64_t min, int64_t max) {
    const int64_t v = step_.intParam(key, fallback);
    check(v >= min && v <= max, "parameter ", key, " is ", v, ", outside [", min, ", ", max, "]");
    return ok() ? v : fallback;
  }
  /// A float parameter in [min, max] (infinite bounds admit infinities; NaN never passes).
  double floatParam(std::string_view key, double fallback, double min, double max) {
    const double v = step_.floatParam(key).value_or(fallback);
    check(v >= min && v <= max, "parameter ", key, " is ", v, ", outside [", min, ", ", max, "]");
    return ok() ? v : fallback;
  }

  /// A relation of the op's contract: `holds`, or the breach `what`.
  template <typename... Args> Contract &check(bool holds, const Args &...what) {
    if (ok() && !holds) {
      // Unprefixed: the caller names the step (the plan validator by program, index and IR name;
      // the compiler by the op's location).
      status_ = Status(StatusCode::InvalidArgument, strCat(what...));
    }
    return *this;
  }

  bool ok() const { return status_.ok(); }
  Status status() const { return status_; }

  static std::string shapeText(const Shape &s) {
    std::string text = "[";
    for (int d = 0; d < s.rank; ++d) {
      text += strCat(d > 0 ? ", " : "", s[d]);
    }
    return text + "]";
  }

private:
  static std::string listText(std::initializer_list<int64_t> dims) {
    Shape s;
    for (int64_t d : dims) {
      s.dims[static_cast<size_t>(s.rank++)] = d;
    }
    return shapeText(s);
  }

  Shape tensor(const char *what, size_t i, const TensorInfo &t, DType element, int rank) {
    if (!ok()) {
      return {};
    }
    // A float activation may be held in f32 where the plan's type is bf16 (the head's logits,
    // mHC's mixing weights); ids and counts are exactly their type.
    const bool typeOk = t.element == element || (element == step_.activation() &&
                                                 element != DType::I32 && t.element == DType::F32);
    check(typeOk && t.shape.rank == rank, what, " ", i, " is ", dtypeName(t.element), " ",
          shapeText(t.shape), ", its op reads ", dtypeName(element), " of ", rank, " dimensions");
    for (int d = 0; ok() && d < rank; ++d) {
      check(t.shape[d] > 0, what, " ", i, " is ", shapeText(t.shape));
    }
    return ok() ? t.shape : Shape{};
  }

  void same(const char *what, size_t i, const Shape &got, const Shape &like) {
    bool equal = got.rank == like.rank;
    for (int d = 0; equal && d < like.rank; ++d) {
      equal = got[d] == like[d];
    }
    check(equal, what, " ", i, " is ", shapeText(got), ", its op reads ", shapeText(like));
  }

  void is(const char *what, size_t i, const Shape &got, std::initializer_list<int64_t> dims) {
    if (!ok()) {
      return;
    }
    int d = 0;
    bool same = true;
    for (int64_t want : dims) {
      same = same && got[d++] == want;
    }
    check(same, what, " ", i, " is ", shapeText(got), ", its op reads ", listText(dims));
  }

  const OpStep &step_;
  Status status_;
};

} // namespace glm::kernels
