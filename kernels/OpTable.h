// The op table: each op of the plan, by its glm mnemonic, and its adapters
// (kernels/<op>/<op>_op.h). The compiler's kernel selection and the CPU engine both dispatch
// through it, so an op is one line here and everything else about it lives in its folder
// (docs/adding-an-op.md).
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

#include <string_view>

namespace glm::kernels {

struct OpAdapters {
  std::string_view mnemonic; // the glm op's: "rms_norm"
  /// Whether the step holds what the adapters below read: counts, element types, shapes,
  /// parameters (kernels/common/OpContract.h). Every plan is checked with it before it runs, so
  /// the adapters may rely on it.
  Status (*check)(const OpStep &step);
  /// The step's GPU launches (kernel instances, grids, arguments) and workspace; Unimplemented
  /// when this op or this shape has no CUDA kernel yet.
  Expected<GpuStep> (*gpu)(const OpStep &step);
  /// Runs the step with the CPU reference.
  Status (*cpu)(const OpStep &step, const HostStep &host);
  /// Whether the op reads EXL3 weights (others are refused them).
  bool takesExl3 = false;
  /// The encodings of kernels/common/DenseFormats.h its CUDA kernels read (a bit per
  /// DenseEncoding, encodingBit); the CPU references read every encoding through WeightView.
  uint8_t gpuEncodings = 0;
};

constexpr uint8_t encodingBit(DenseEncoding e) { return uint8_t(1u << static_cast<int>(e)); }
inline constexpr uint8_t kQ4AndFp8 =
    encodingBit(DenseEncoding::Q4) | encodingBit(DenseEncoding::Fp8);

/// The op `mnemonic`, or null when no such op exists (collectives are not ops of this table: the
/// engines run them through their communicator).
const OpAdapters *findOp(std::string_view mnemonic);

/// Checks that `step` only reads EXL3 weights if its op takes them, and (`gpu`) Q4 or fp8 weights
/// only if its CUDA kernels do; Unimplemented naming the weight otherwise.
Status checkWeightFormats(const OpAdapters &op, const OpStep &step, bool gpu);

} // namespace glm::kernels
