// Builds the `glm` IR of GLM-5.3 programs from a Glm53Config: the model description.
#pragma once

#include "base/Status.h"
#include "ir/glm/GlmDialect.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <string>
#include <vector>

namespace glm::glm53 {

/// One program of a plan (DESIGN.md §2): a prefill chunk of C tokens of one sequence, or a decode
/// step of B sequences by R rows each (R > 1 is a speculative verify window).
struct ProgramShape {
  enum class Kind { Prefill, Decode };
  Kind kind = Kind::Decode;
  int64_t batch = 1; // B: sequences (1 for prefill)
  int64_t rows = 1;  // R for decode, C for prefill
  /// The head (final norm, lm_head, sampling) runs on each sequence's last row alone, and the
  /// program returns [B, vocab] logits: what serving reads of a prefill chunk. Otherwise every
  /// row's logits, [B R, vocab] (decode verify windows, --dump-logits, the golden tests).
  bool lastRowLogits = false;

  int64_t tokens() const { return batch * rows; }
  /// "prefill_c512", "decode_b4_r1": the program's function name.
  std::string name() const;
};

/// How each checkpoint tensor is stored, which picks its IR format and element type. Default: the
/// release's dtype (bf16, or f32 for the tensors HF keeps in fp32).
using WeightFormatFn = std::function<ir::WeightFormat(const WeightInfo &)>;

/// Builds a module holding the weight and state declarations and one func.func per program, with
/// global (unsharded) shapes and every op located at its name `blk.<L>.<block>.<name>`. Each
/// program takes the step's token ids and returns its logits and the sampler's ids and logprobs;
/// with `mtp`, the MTP head (layer num_hidden_layers, `blk.<L>.*`) runs after the trunk's on
/// every row and the program also returns its greedy draws: the guess of the token after each
/// sampled one. InvalidArgument for `mtp` on a checkpoint without the layer; otherwise an error
/// means the config and the tensor table disagree (a bug, reported as Internal).
Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildGlm53Module(mlir::MLIRContext &context, const Glm53Config &config,
                 const std::vector<ProgramShape> &programs, const WeightFormatFn &formatOf = {},
                 bool mtp = false);

} // namespace glm::glm53
