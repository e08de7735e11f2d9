// OpStep: one plan step as an op's adapter (kernels/<op>/<op>_op.cpp) reads it, whoever holds the
// step. The compiler implements it over a plan.step of the IR, to choose kernels and build their
// arguments; the CPU engine over a step of the plan file, to run the reference kernels. So both
// read an op's operands, weights, states and parameters through one function per op, and cannot
// disagree about them.
//
// A step's tensors are named by position: operands, results, weights and states in the op's
// contract order (what the op's folder documents). Stateful steps take the program's step-context
// io slots as trailing operands: positions, sequence slots, and for paged states the page table
// (kernels/common/StepContext.h).
#pragma once

#include "base/DType.h"
#include "base/Status.h"
#include "kernels/common/DenseFormats.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace glm::kernels {

/// A tensor shape of up to four dimensions.
struct Shape {
  std::array<int64_t, 4> dims{};
  int rank = 0;

  int64_t operator[](int d) const { return dims[static_cast<size_t>(d)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      n *= dims[static_cast<size_t>(d)];
    }
    return n;
  }
  /// The product of every dimension after the first (1 for a vector).
  int64_t rowWidth() const { return rank > 0 ? numel() / dims[0] : 1; }
};

/// An operand or result: a dense row-major buffer of the program's static shape.
struct TensorInfo {
  DType element = DType::F32;
  Shape shape;
};

/// Where an EXL3 binding's parts lie in its slice of the weights arena: the numbers of
/// runtime/weights/Exl3Tensors.h's Exl3ArenaLayout (which defines the layout), as kernels address
/// them. `matrices` [out, in] matrices padded to k x n; `slotBits` is the plan's K.
struct Exl3Geometry {
  int64_t matrices = 0, in = 0, out = 0, k = 0, n = 0;
  int slotBits = 0;
  uint64_t trellisStride = 0, suhOffset = 0, svhOffset = 0, metaOffset = 0;
};

struct WeightInfo {
  std::string name;
  DType element = DType::F32; // as held in the arena (for EXL3, the logical bf16; Q4: U8)
  Shape shape;                // this rank's slice, logical ([out, in] for every encoding)
  /// Plain elements, or the slice laid out as kernels/common/DenseFormats.h defines Q4 groups
  /// or fp8 blocks (element U8 or F8_E4M3).
  DenseEncoding encoding = DenseEncoding::Plain;
  bool exl3 = false;
  Exl3Geometry exl3Geometry; // when exl3

  /// How a dense weight's bytes are laid out: fp8 e4m3 weights are fp8 blocks (their scales after
  /// the values) whatever `encoding` says.
  DenseEncoding denseEncoding() const {
    return element == DType::F8_E4M3 && !exl3 ? DenseEncoding::Fp8 : encoding;
  }
};

struct StateInfo {
  std::string name;
  DType element = DType::F32;
  int64_t unitBytes = 0;    // one sequence's slot, or one paged row
  int64_t offsetInPage = 0; // paged: where this layout's rows start within a page
};

/// The machine the plan is for (the plan's target).
struct TargetInfo {
  std::string name; // "cpu", "sm_90a", "sm_121a"
  int smCount = 0;
  uint32_t sharedMemoryPerBlock = 0;
};

/// A step's rows per sequence from the rows of its first tensor (its first operand's, or its first
/// result's without operands): every op's first tensor is row-major with the step's rows first.
inline int64_t stepRowsPerSequence(int64_t batch, int64_t firstTensorRows) {
  return batch > 0 ? firstTensorRows / batch : 0;
}

class OpStep {
public:
  virtual ~OpStep() = default;

  /// The step's IR name (blk.<L>.<block>.<name>), for errors.
  virtual std::string name() const = 0;
  /// The step's static shape: the program's `batch` sequences of `rowsPerSequence` rows each,
  /// which is the program's rows, or one for the head of a program that returns each sequence's
  /// last row only (the steps after its last_rows). Implementations read it off the step's first
  /// tensor (stepRowsPerSequence).
  virtual int64_t batch() const = 0;
  virtual int64_t rowsPerSequence() const = 0;
  int64_t rows() const { return batch() * rowsPerSequence(); }
  /// Whether the step is in a decode program: one-row steps of a batch, or verify windows.
  virtual bool decodeProgram() const = 0;
  /// The rows an adapter makes its choices for (kernel, split, chunking): 1 in a decode program
  /// of at most kRowInvariantRows rows, so that a row's result has the same bits alone, in any
  /// batch and in any verify window (speculative decoding accepts a draft only where it equals
  /// the serial draw: docs/speculative-decoding.md); the step's rows otherwise. Where a kernel's
  /// arithmetic for a row does not depend on the rows beside it, choosing by 1 changes only its
  /// speed.
  int64_t choiceRows() const { return decodeProgram() && rows() <= kRowInvariantRows ? 1 : rows(); }
  /// The largest decode program whose rows all get their one-row bits: beyond it (serial batches
  /// of more than 64 sequences) the kernels of many rows are worth more than batch invariance.
  static constexpr int64_t kRowInvariantRows = 64;
  /// The plan's activation type: F32 or BF16.
  virtual DType activation() const = 0;

  virtual size_t operandCount() const = 0;
  virtual size_t resultCount() const = 0;
  virtual size_t weightCount() const = 0;
  virtual size_t stateCount() const = 0;
  virtual TensorInfo operand(size_t i) const = 0;
  virtual TensorInfo result(size_t i) const = 0;
  virtual WeightInfo weight(size_t i) const = 0;
  virtual StateInfo state(size_t i) const = 0;
  bool hasWeight(size_t i) const { return i < weightCount(); }

  /// A parameter by key: an integer (bools and unit attributes read as 1) or a float.
  virtual std::optional<int64_t> intParam(std::string_view key) const = 0;
  virtual std::optional<double> floatParam(std::string_view key) const = 0;
  int64_t intParam(std::string_view key, int64_t fallback) const {
    return intParam(key).value_or(fallback);
  }
  float floatParam(std::string_view key, float fallback) const {
    const std::optional<double> v = floatParam(key);
    return v ? static_cast<float>(*v) : fallback;
  }

  /// The state pool: tokens and bytes per page (0 without a pool).
  virtual int64_t pageTokens() const = 0;
  virtual int64_t pageBytes() const = 0;
  virtual TargetInfo target() const = 0;

  /// Dimension d of operand or result i.
  int64_t operandDim(size_t i, int d) const { return operand(i).shape[d]; }
  int64_t resultDim(size_t i, int d) const { return result(i).shape[d]; }
  /// The element type a dense kernel reads weight i as: bf16 for an EXL3 binding (its
  /// reconstruction), the stored type otherwise; the activation type when the weight is absent.
  DType denseWeightType(size_t i) const {
    if (!hasWeight(i)) {
      return activation();
    }
    const WeightInfo w = weight(i);
    return w.exl3 ? DType::BF16 : w.element;
  }
  /// An error naming this step.
  template <typename... Args> Status error(StatusCode code, const Args &...args) const {
    return Status(code, strCat("step ", name(), ": ", args...));
  }
};

} // namespace glm::kernels
