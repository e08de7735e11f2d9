// The compile pipeline: model description -> partition -> plan -> arenas -> segments -> verify ->
// plan file.
#pragma once

#include "base/Status.h"
#include "models/glm53/Builder.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace glm::compiler {

struct CompileOptions {
  std::string target = "sm_121a";
  int64_t tp = 2;
  std::string precision = "bf16";
  int64_t maxSeqs = 4;
  int64_t maxContext = 131072; // each request's window
  /// Tokens of the page pool all sequences share; 0: as many as the target's memory holds after
  /// `hostReserve` and the other arenas (a target without memory, the CPU: one window).
  int64_t poolTokens = 0;
  /// Bytes of the target's memory left to the host; unset: the target's (TargetDesc).
  std::optional<int64_t> hostReserve;
  std::string kv = "bf16";
  int64_t exl3Bits = 4;
  /// How the weights arena holds the dense linears and the head (glm-choose-dense-formats): bf16
  /// (as stored), q4 or fp8; empty takes denseDefaults.
  std::string dense;
  std::string head;
  /// Prefill programs compute the head on each sequence's last row only (what serving reads);
  /// false gives every row's logits (--prefill-logits all: --dump-logits, the golden tests).
  bool prefillLastRowLogits = true;
  std::vector<glm53::ProgramShape> programs;
  /// Every program runs the MTP head after the trunk's and returns its draws (the checkpoint
  /// must have the layer: glmc's --mtp checks it).
  bool mtp = false;
  /// plan-group-linears: independent decode linears of one width in one linear_group step where
  /// the target's kernels take them (--group-linears off keeps one step a linear, to compare
  /// against).
  bool groupLinears = true;
  /// plan-group-short-convs: a KDA layer's q/k/v convs in one short_conv step
  /// (--group-short-convs off keeps one step a conv, to compare against).
  bool groupShortConvs = true;
  /// plan-fuse-mhc: each mhc_post folded into the mhc_pre that reads its streams (--fuse-mhc off
  /// keeps the two steps, to compare against).
  bool fuseMhc = true;
  /// plan-fuse-mhc-norm: each sub-block's input RMSNorm folded into the mhc_pre whose x it
  /// normalises (--fuse-mhc-norm off keeps the two steps, to compare against).
  bool fuseMhcNorm = true;
  /// plan-fuse-kda-norm: KDA's gated output norm folded into the kda step whose result it reads
  /// (--fuse-kda-norm off keeps the two steps, to compare against).
  bool fuseKdaNorm = true;
  /// plan-fuse-linear-add: an add folded into the linear whose output it reads, as that linear's
  /// addend (--fuse-linear-add off keeps the two steps, to compare against).
  bool fuseLinearAdd = true;
  /// Stage progress on stderr (base/Progress.h: a bar on a terminal, lines otherwise): building
  /// the IR, the passes, compiling the kernels (with their count) and emitting the file. Unset,
  /// it is on for models of more than 1 GiB of weights, as weight loading shows its bar: only
  /// they compile long enough to need it (a full-size cold compile spends ~30 s in NVRTC).
  std::optional<bool> progress;
};

/// Parses --prefill-logits: "last" (the default) or "all".
Expected<bool> parsePrefillLogits(const std::string &text);

/// The default program set for a plan: decode at batch 1 and at max-seqs (one row each), verify
/// windows (1 x 4, 1 x 8, 1 x 16 and min(max-seqs, 4) x 4, and with the MTP head 1 x 2 and
/// min(max-seqs, 4) x 2), and one prefill chunk of min(512, max-context) tokens. `programs`
/// replaces the defaults of its kinds.
std::vector<glm53::ProgramShape> defaultPrograms(const CompileOptions &options);

/// The programs a plan compiles: `options.programs`, the defaults of the kinds it does not give,
/// and each prefill program's logits rows as `options` says.
std::vector<glm53::ProgramShape> planPrograms(const CompileOptions &options);

/// The dense formats a plan takes when not told: a GPU plan in bf16 (the deployment) reads q4
/// linears and an fp8 head, docs/quantization.md says why; CPU and f32 plans, the references,
/// hold weights as stored. Returns {dense, head}, each as given when given.
std::pair<std::string, std::string> denseDefaults(const CompileOptions &options);

/// The fusion passes, in pipeline order (after partitioning): `glmc dump-ir --stage fused`.
void addFusionPasses(mlir::OpPassManager &pm);

/// The passes after the model description up to plan-verify, in pipeline order: `glmc dump-ir
/// --stage plan` (compileGlm53Plan then compiles the kernels and writes the file).
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// Builds, lowers and emits a plan. Diagnostics from the passes go to the context's handler; the
/// returned error summarises them. The bytes are what the IR says; runtime::PlanFile validates
/// them as it would any file.
Expected<std::vector<uint8_t>> compileGlm53Plan(mlir::MLIRContext &context,
                                                const glm53::Glm53Config &config,
                                                const glm53::WeightFormatFn &formats,
                                                const CompileOptions &options);

} // namespace glm::compiler
